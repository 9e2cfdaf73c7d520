#!/usr/bin/env python3
"""Chunked prefill under load (issue 20, "Tests"): 32 streaming clients are decoding when one
2,000-token prompt joins; how much does it raise their inter-token p99, with chunked prefill
(--max-num-batched-tokens 512: the prompt shares 4 steps with the decodes) and without (4096:
the whole prompt in one step)? The issue's check: the chunked rise is smaller than the prompt's
unchunked prefill time (its TTFT alone on an idle server), by a margin measured and recorded here.

For each budget (--chunked, --unchunked), `ragged serve --max-num-batched-tokens B
--no-prefix-caching` (own session; no prefix caching, so every long prompt is computed whole):
  1. idle: the long prompt alone (--idle-reps times, fresh random ids each time, "max_tokens" 1,
     streamed): its TTFT from the client's send to the first event; the median is "the prefill
     time" of that budget (with the unchunked budget: the unchunked prefill time);
  2. --warmup-rounds (1) unmeasured, then --reps measured rounds: --streams (32) clients stream completions of --stream-prompt (64) token prompts
     ("ignore_eos", "max_tokens" large enough to outlast the round); once every stream has
     produced --settle events, --before-s of steady decoding; then the long prompt joins
     ("max_tokens" 2, streamed) at t_join and its first event marks the prefill's end t_first;
     --after-s more; then every connection is closed (the server cancels the streams).
  Inter-token gaps: per stream, the times between consecutive server-sent events (taken by one
  select() loop over raw sockets, so 33 streams cost no Python threads). "before": gaps ending in
  [t_join - before_s, t_join); "during": gaps overlapping the prefill, ending after t_join and
  starting before t_first (plus the one step after it that carries the prompt's first token).
  p99 (nearest rank) over all streams and rounds, each.
Reported: before/during p99 and max per budget, the rise (during p99 - before p99), the idle
prefill times, and the check rise(chunked) < unchunked prefill time with its margin (ms and x).
An event may carry more than one token when the client lags; the gap is then the time between
two visible updates, which is what a reader of the stream sees.

Needs a model with >= long-prompt + 1 + stream prompts' positions (the SmolLM2 shape has 8,192;
GPT-2's 1,024 is too short). Models: as gen_serving.py (--model tiny | smollm2 | DIR).
Outputs: bench/results/chunked_prefill_<device>_<YYYYMMDD-HHMM>-<model>-<commit>[-<tag>].json and
.md (bench/results/README.md).

  python3 bench/serving/chunked_prefill.py --model tiny                 # the 2-core CPU
  python3 bench/serving/chunked_prefill.py --model smollm2 --device cuda --dtype fp16
"""
import argparse
import datetime
import json
import os
import random
import select
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from gen_serving import (GenServer, log, metrics_delta, model_facts, pct, proc_cpu_s,  # noqa: E402
                         resolve_model)
from static_baseline import sys_busy_s, wait_quiet  # noqa: E402
from sweep import cpu_name, device_slug, free_port, git_commit, gpu_names, slug  # noqa: E402

MARK = b'"object":"text_completion"'  # once per completion event


class Stream:
    """One streamed POST /v1/completions on a raw non-blocking socket; times[] holds the
    monotonic time of every event as it arrived."""

    def __init__(self, port, body):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = json.dumps(body).encode()
        self.sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: " +
                          str(len(data)).encode() + b"\r\n\r\n" + data)
        self.t_send = time.monotonic()
        self.sock.setblocking(False)
        self.buf = b""
        self.times = []
        self.closed = False
        self.status = None

    def on_readable(self, now):
        try:
            chunk = self.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            return
        self.buf += chunk
        if self.status is None and b"\r\n" in self.buf:
            try:
                self.status = int(self.buf.split(b" ", 2)[1])
            except (IndexError, ValueError):
                self.status = -1
        n = self.buf.count(MARK)
        self.times += [now] * n
        # keep a tail that may hold the start of a split marker
        if n:
            self.buf = self.buf[self.buf.rfind(MARK) + len(MARK):]
        self.buf = self.buf[-len(MARK):]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed = True


def pump(streams, until, stop=None):
    """Read every open stream until time `until` or stop() is true."""
    while time.monotonic() < until and not (stop and stop()):
        live = [s for s in streams if not s.closed]
        if not live:
            return
        r, _, _ = select.select([s.sock for s in live], [], [], 0.005)
        now = time.monotonic()
        for s in live:
            if s.sock in r:
                s.on_readable(now)


def rand_ids(rng, n, vocab):
    return [rng.randrange(3, vocab) for _ in range(n)]


def idle_prefill(port, a, rng, vocab):
    """TTFT of the long prompt alone: send -> its first event, ms."""
    out = []
    for _ in range(a.idle_reps):
        s = Stream(port, {"prompt": rand_ids(rng, a.long_prompt, vocab), "max_tokens": 1,
                          "ignore_eos": True, "stream": True})
        pump([s], time.monotonic() + 60, lambda: bool(s.times) or s.closed)
        if s.times:
            out.append((s.times[0] - s.t_send) * 1e3)
        s.close()
        time.sleep(0.2)
    return out


def one_round(port, a, rng, vocab):
    """32 decoding streams, the long prompt joins; returns the gaps and times of the round."""
    streams = []
    max_tokens = a.max_tokens
    for _ in range(a.streams):
        streams.append(Stream(port, {"prompt": rand_ids(rng, a.stream_prompt, vocab),
                                     "max_tokens": max_tokens, "ignore_eos": True,
                                     "stream": True}))
    t0 = time.monotonic()
    pump(streams, t0 + 60, lambda: all(len(s.times) >= a.settle or s.closed for s in streams))
    if any(s.closed or len(s.times) < a.settle for s in streams):
        for s in streams:
            s.close()
        return {"error": "streams did not settle (status %s)" %
                sorted({s.status for s in streams}, key=str)}
    pump(streams, time.monotonic() + a.before_s)
    long_s = Stream(port, {"prompt": rand_ids(rng, a.long_prompt, vocab), "max_tokens": 2,
                           "ignore_eos": True, "stream": True})
    t_join = long_s.t_send
    pump(streams + [long_s], t_join + 60, lambda: bool(long_s.times) or long_s.closed)
    t_first = long_s.times[0] if long_s.times else None
    pump(streams + [long_s], time.monotonic() + a.after_s)
    ended_early = sum(1 for s in streams if s.closed)
    for s in streams + [long_s]:
        s.close()
    if t_first is None:
        return {"error": "the long prompt got no token"}
    before, during, per_stream_steps = [], [], []
    for s in streams:
        n_during = 0
        for k in range(1, len(s.times)):
            g = (s.times[k] - s.times[k - 1]) * 1e3
            if t_join - a.before_s <= s.times[k] < t_join:
                before.append(g)
            elif s.times[k] > t_join and s.times[k - 1] < t_first:
                during.append(g)
                n_during += 1
        per_stream_steps.append(n_during)
    return {"before": before, "during": during, "ttft_ms": (t_first - t_join) * 1e3,
            "events_during_mean": sum(per_stream_steps) / len(per_stream_steps),
            "streams_ended_early": ended_early}


def run_budget(a, budget, vocab, run_dir, rng):
    quiet = wait_quiet(a.wait_quiet_s) if a.wait_quiet_s > 0 else None
    port = free_port()
    a.max_num_batched_tokens = budget
    srv = GenServer(a, port, os.path.join(run_dir, f"serve_b{budget}.log"),
                    ["--no-prefix-caching"])
    res = {"budget": budget, "serve_cmd": " ".join(srv.cmd), "quiet_wait": quiet}
    try:
        if not srv.wait_healthy(a.start_timeout_s):
            res["error"] = "server did not start"
            return res
        idle_prefill(port, a, rng, vocab)  # warm-up (first-touch of the KV blocks, caches)
        res["idle_prefill_ms"] = idle_prefill(port, a, rng, vocab)
        for _ in range(a.warmup_rounds):  # new step shapes (GEMM plans, graphs) first seen here
            one_round(port, a, rng, vocab)
            time.sleep(0.5)
        m0 = srv.metrics()
        rounds = []
        for r in range(a.reps):
            t0, b0, s0, c0 = (time.monotonic(), sys_busy_s(), proc_cpu_s(srv.proc.pid),
                              time.process_time())
            rd = one_round(port, a, rng, vocab)
            if None not in (b0, s0):
                # cores kept busy by processes other than the server and this client
                rd["other_cpu_cores"] = ((sys_busy_s() - b0) - (proc_cpu_s(srv.proc.pid) - s0) -
                                         (time.process_time() - c0)) / (time.monotonic() - t0)
            rounds.append(rd)
            log(f"budget {budget} round {r}: " + (rd.get("error") or
                f"before p99 {pct(rd['before'], 99):.2f} ms, during p99 "
                f"{pct(rd['during'], 99):.2f} ms, long TTFT {rd['ttft_ms']:.1f} ms"))
            time.sleep(0.5)
        res["server"] = metrics_delta(m0, srv.metrics())
        res["rounds"] = [{k: v for k, v in rd.items() if k not in ("before", "during")} |
                         {"before_p99": pct(rd.get("before"), 99),
                          "during_p99": pct(rd.get("during"), 99),
                          "during_max": max(rd["during"]) if rd.get("during") else None}
                         for rd in rounds]
        before = [g for rd in rounds for g in rd.get("before", [])]
        during = [g for rd in rounds for g in rd.get("during", [])]
        res.update({"before_n": len(before), "during_n": len(during),
                    "before_p50": pct(before, 50), "before_p99": pct(before, 99),
                    "during_p50": pct(during, 50), "during_p99": pct(during, 99),
                    "during_max": max(during) if during else None,
                    "long_ttft_ms": [rd["ttft_ms"] for rd in rounds if "ttft_ms" in rd]})
        if res["before_p99"] is not None and res["during_p99"] is not None:
            res["rise_p99_ms"] = res["during_p99"] - res["before_p99"]
    finally:
        res["serve_exit"] = srv.stop()
    return res


def markdown(rep):
    a, m, c = rep["args"], rep["meta"], rep["check"]
    L = [f"# Chunked prefill under load ({m['device_name']})", "",
         f"- date {m['date']}, commit {m['commit']}, load average at start {m['loadavg']}",
         f"- model {a['model_name']} ({rep['model_facts']['params'] / 1e6:.1f} M parameters, "
         f"random weights), {a['device']} {a['dtype']}; `ragged serve --max-num-seqs "
         f"{a['max_num_seqs']} --max-num-batched-tokens B --no-prefix-caching`",
         f"- {a['streams']} streams of {a['stream_prompt']}-token prompts decoding; a "
         f"{a['long_prompt']}-token prompt joins after {a['before_s']} s of steady decoding; "
         f"{a['reps']} rounds per budget; inter-token gaps = times between server-sent events, "
         f"before = the {a['before_s']} s before the join, during = gaps overlapping the prefill",
         "", "| budget B | idle prefill ms (median) | gaps before p50 / p99 | during p50 / p99 / max | "
         "rise of p99 | long prompt TTFT under load | events per stream during | other "
         "processes, cores |",
         "|---|---|---|---|---|---|---|---|"]
    f = lambda v, d=2: "-" if v is None else f"{v:.{d}f}"  # noqa: E731
    for r in rep["budgets"]:
        if "error" in r:
            L.append(f"| {r['budget']} | error: {r['error']} | | | | | | |")
            continue
        ev = [x.get("events_during_mean") for x in r["rounds"] if x.get("events_during_mean")]
        L.append(f"| {r['budget']} | {f(pct(r['idle_prefill_ms'], 50), 1)} | "
                 f"{f(r['before_p50'])} / {f(r['before_p99'])} | {f(r['during_p50'])} / "
                 f"{f(r['during_p99'])} / {f(r['during_max'])} | {f(r.get('rise_p99_ms'))} | "
                 f"{', '.join(f(x, 1) for x in r['long_ttft_ms'])} | "
                 f"{f(sum(ev) / len(ev), 1) if ev else '-'} | "
                 f"{', '.join(f(x.get('other_cpu_cores')) for x in r['rounds'])} |")
    L += ["", "## Check (issue 20)", ""]
    if c.get("rise_chunked_ms") is not None and c.get("unchunked_prefill_ms") is not None:
        L.append(f"- chunked rise of the streams' inter-token p99 {c['rise_chunked_ms']:.2f} ms "
                 f"vs the prompt's unchunked prefill time {c['unchunked_prefill_ms']:.2f} ms: "
                 f"{'PASS' if c['pass'] else 'FAIL'}, margin {c['margin_ms']:.2f} ms "
                 f"({c['margin_x']:.2f}x)")
        if c.get("rise_unchunked_ms") is not None:
            L.append(f"- for reference, unchunked rise {c['rise_unchunked_ms']:.2f} ms")
    else:
        L.append("- not measured (see the errors above)")
    if rep.get("notes"):
        L += ["", "## Notes", ""] + [f"- {n}" for n in rep["notes"]]
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--stream-prompt", type=int, default=64)
    ap.add_argument("--long-prompt", type=int, default=2000)
    ap.add_argument("--chunked", type=int, default=512)
    ap.add_argument("--unchunked", type=int, default=4096)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--idle-reps", type=int, default=5)
    ap.add_argument("--warmup-rounds", type=int, default=1, help="rounds run first, not measured")
    ap.add_argument("--settle", type=int, default=5, help="events per stream before measuring")
    ap.add_argument("--before-s", type=float, default=1.0)
    ap.add_argument("--after-s", type=float, default=0.3)
    ap.add_argument("--max-tokens", type=int, default=0,
                    help="each stream's max_tokens (0: model positions - stream prompt - 1)")
    ap.add_argument("--timeout-ms", type=float, default=120000)
    ap.add_argument("--start-timeout-s", type=float, default=300)
    ap.add_argument("--serve-arg", action="append", default=[])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--wait-quiet-s", type=float, default=0,
                    help="on a shared host: before each budget, wait up to this long for other "
                         "processes to use < 0.3 cores")
    ap.add_argument("--ragged", default=os.path.join(ROOT, "build", "ragged"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--tag", default="")
    ap.add_argument("--note", action="append", default=[])
    a = ap.parse_args(argv)
    a.dtype = a.dtype or ("fp16" if a.device == "cuda" else "fp32")
    a.model, model_name = resolve_model(a.model)
    facts = model_facts(a.model, a.dtype)
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    n_pos = cfg.get("max_position_embeddings") or cfg.get("n_positions")
    if n_pos < a.long_prompt + 2 or n_pos < a.stream_prompt + 64:
        sys.exit(f"chunked_prefill: the model has {n_pos} positions; needs > {a.long_prompt + 1}")
    if not a.max_tokens:
        a.max_tokens = n_pos - a.stream_prompt - 1
    gpus = gpu_names() if a.device == "cuda" else []
    ncpu = os.cpu_count()
    dev = device_slug(gpus)
    commit = git_commit()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M")
    base = f"chunked_prefill_{dev}_{stamp}-{slug(model_name)}-{commit.split('+')[0][:7]}"
    if a.tag:
        base += "-" + slug(a.tag)
    run_dir = os.path.join(ROOT, "build", "serving_logs", base)
    os.makedirs(run_dir, exist_ok=True)
    os.makedirs(a.out_dir, exist_ok=True)
    args_rec = dict(vars(a), model_name=model_name)
    rep = {"meta": {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "commit": commit, "cpu": cpu_name(), "cpus": ncpu, "gpus": gpus,
                    "device_name": gpus[0] if gpus else f"{ncpu}-core {cpu_name()}",
                    "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg())},
           "args": args_rec, "model_facts": facts, "budgets": [], "notes": list(a.note)}
    rng = random.Random(a.seed)
    for budget in (a.chunked, a.unchunked):
        log(f"budget {budget}")
        rep["budgets"].append(run_budget(a, budget, facts["vocab"], run_dir, rng))
    ch, un = rep["budgets"]
    c = {"rise_chunked_ms": ch.get("rise_p99_ms"), "rise_unchunked_ms": un.get("rise_p99_ms"),
         "unchunked_prefill_ms": pct(un.get("idle_prefill_ms"), 50)}
    if c["rise_chunked_ms"] is not None and c["unchunked_prefill_ms"]:
        c["margin_ms"] = c["unchunked_prefill_ms"] - c["rise_chunked_ms"]
        c["margin_x"] = c["unchunked_prefill_ms"] / max(c["rise_chunked_ms"], 1e-9)
        c["pass"] = c["margin_ms"] > 0
    rep["check"] = c
    out = os.path.join(a.out_dir, base)
    with open(out + ".json", "w") as f:
        json.dump(rep, f, indent=1)
    md = markdown(rep)
    with open(out + ".md", "w") as f:
        f.write(md)
    print(md)
    log(f"wrote {out}.json and .md")
    return 0 if c.get("pass") else 1


if __name__ == "__main__":
    sys.exit(main())
