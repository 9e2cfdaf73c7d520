"""Per-token time of ragged's three generation entry points in one run (issue 27): the CLI
(`ragged generate --batch N`), the Python API (`ragged.Generator.generate`) and the server
(`ragged serve`, N concurrent streamed /v1/completions), on the same model, prompts of about 30
tokens, 128 new tokens, greedy, EOS ignored. All three run the library's one engine
(src/gen/engine.c); the target is that they are within 5% of each other.

Per-token time (TPOT, ms) of a request = (end - first token) / 127:
  CLI     its JSON line's timing (total_s - first_token_s), of the batches after the first
          of the run (the first pays the CUDA graph captures);
  Python  the result's time_total_s - time_first_token_s, of the calls after a first;
  server  the server's own mean inter-token latency over a measured round (the delta of its
          ragged_gen_inter_token_latency_seconds histogram in /metrics), after one warm-up
          round; beside it the client's view: the median over the N streams of the wall clock
          between the first and the last streamed token / 127 (a Python client reading N SSE
          streams under the GIL, so it includes the client's own time).
Each is measured EP_REPS times (default 3) and the median kept; the row's "samples" hold them.
"spread" is max / min - 1 over the three; "steady_spread" puts the server's steady decode
(events 32..96 of each stream, all streams past their prefill) in place of its whole-request
TPOT, which also carries the prefills of streams that arrived after it.
The model is loaded once per entry point, outside every timing.

Usage: RAGGED_BIN=build/ragged RAGGED_LIB=build/libragged.so \
       python3 bench/peer/entry_points.py OUT.json --model DIR --device cuda|cpu \
       --batches 1,16,64 [--label NAME]"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
NEW = int(os.environ.get("EP_NEW", "128"))  # new tokens per request (EP_NEW: longer rounds for a profiler)
REPS = int(os.environ.get("EP_REPS", "3"))  # measured repetitions per entry point (median kept)
SAMPLES = {}  # entry point -> its REPS measured values
BIN = os.environ.get("RAGGED_BIN", os.path.join(ROOT, "build", "ragged"))


def prompts(n):
    """n distinct ~30-token texts (the synthetic tokenizer of make_gen_model.py gives one token
    per character of these; real tokenizers about 6-8 per line)."""
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()
    out = []
    for i in range(n):
        ws = [words[(i * 7 + k * 3) % len(words)] for k in range(6)]
        out.append(f"{i} " + " ".join(ws))
    return [p[:30] for p in out]


def cli_tpot(model, device, n):
    with tempfile.TemporaryDirectory() as d:
        inp = os.path.join(d, "in.txt")
        with open(inp, "w") as f:
            f.write("\n".join(prompts(n) * (1 + REPS)) + "\n")
        t0 = time.time()
        p = subprocess.run([BIN, "generate", "--model", model, "--device", device,
                            "--max-tokens", str(NEW), "--ignore-eos", "--batch", str(n),
                            "--input", inp, "--no-progress"], capture_output=True, timeout=900)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.decode(errors="replace")[-2000:])
        rows = [json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]
        assert len(rows) == n * (1 + REPS), len(rows)
        toks = [r["usage"]["completion_tokens"] for r in rows]
        assert all(k == NEW for k in toks), toks
        v = []
        for b in range(1, 1 + REPS):  # batches after the first (which pays the graph captures)
            t = rows[b * n]["timing"]
            v.append((t["total_s"] - t["first_token_s"]) / (NEW - 1) * 1e3)
        SAMPLES["cli"] = [round(x, 4) for x in v]
        return statistics.median(v), time.time() - t0


def python_tpot(model, device, n):
    import ragged
    g = ragged.Generator(model, device=device, max_batch_tokens=2048)
    try:
        g.generate(prompts(n), max_tokens=NEW, ignore_eos=True)  # warm-up (graphs)
        v = []
        for _ in range(REPS):
            out = g.generate(prompts(n), max_tokens=NEW, ignore_eos=True)
            assert all(o["completion_tokens"] == NEW for o in out)
            o = out[0]
            v.append((o["time_total_s"] - o["time_first_token_s"]) / (NEW - 1) * 1e3)
        SAMPLES["python"] = [round(x, 4) for x in v]
        return statistics.median(v)
    finally:
        g.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def one_stream(port, text, res, k):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = json.dumps({"model": "m", "prompt": text, "max_tokens": NEW, "stream": True,
                       "ignore_eos": True, "temperature": 0})
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    times, buf = [], b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if ev.startswith(b"data: ") and ev[6:] != b"[DONE]":
                times.append(time.perf_counter())
    c.close()
    res[k] = times


def itl_metrics(port, name="ragged_gen_inter_token_latency_seconds"):
    """(sum s, count) of one of the server's histograms (/metrics): by default its
    inter-token latency."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    v = {}
    for line in text.splitlines():
        for k in ("sum", "count"):
            if line.startswith(name + "_" + k + " "):
                v[k] = float(line.split()[1])
    return v.get("sum", 0.0), v.get("count", 0.0)


SERVER_ARGS = []
STEP = {}
TRACE = {}


def trace_summary(path, n_steps, batch):
    """Medians over the measured round's pure decode steps at its largest batch (of the last
    n_steps lines of the server's --trace-steps file, those whose step made one token for each
    of the most sequences the round ran at once; `batch` when every stream was in): the model's time,
    the server's phases around it, and the start-to-start interval."""
    rows = []
    with open(path) as f:
        for line in f:
            if not line.startswith("#"):
                rows.append([float(x) for x in line.split()])
    rows = rows[-int(n_steps):]
    top = max(int(r[7]) for r in rows)  # the most sequences the round ran at once
    full = [(i, r) for i, r in enumerate(rows) if int(r[6]) == int(r[7]) == top]
    if not full:
        return {}
    med = lambda v: round(statistics.median(v), 4) if v else 0
    return {"trace_steps": len(full), "trace_batch": top,
            "trace_model_ms": med([r[3] for _, r in full]),
            "trace_sweep_ms": med([r[1] for _, r in full]),
            "trace_schedule_ms": med([r[2] for _, r in full]),
            "trace_accept_ms": med([r[4] for _, r in full]),
            "trace_hand_ms": med([r[5] for _, r in full]),
            "trace_interval_ms": med([rows[i + 1][0] - r[0] for i, r in full
                                      if i + 1 < len(rows)])}


def server_tpot(model, device, n):
    """(the server's own mean inter-token latency over the measured round, from /metrics;
    the client's median first-to-last streamed token / 127)."""
    port = free_port()
    extra = []
    if TRACE.get("dir"):
        TRACE["file"] = os.path.join(TRACE["dir"], "trace_%s_b%d_%d.txt" % (
            os.path.basename(model.rstrip("/")), n, len(os.listdir(TRACE["dir"]))))
        extra = ["--trace-steps", TRACE["file"]]
    srv = subprocess.Popen([BIN, "serve", "--model", model, "--device", device, "--port",
                            str(port), "--max-num-seqs", str(max(64, n))] + SERVER_ARGS + extra,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("server did not start")
        per = []  # per measured round: (server-side ITL, client median, steady, step stats)
        for rnd in range(1 + REPS):  # a warm-up round, then the measured ones
            m0 = itl_metrics(port)
            s0 = itl_metrics(port, "ragged_gen_step_duration_seconds")
            res = [None] * n
            th = [threading.Thread(target=one_stream, args=(port, t, res, k))
                  for k, t in enumerate(prompts(n))]
            w0 = time.perf_counter()
            for t in th:
                t.start()
            for t in th:
                t.join()
            wall = time.perf_counter() - w0
            m1 = itl_metrics(port)
            s1 = itl_metrics(port, "ragged_gen_step_duration_seconds")
            if rnd == 0:
                continue
            steps = max(s1[1] - s0[1], 1)
            # steady decode: events 32..96 of every stream, when every request of the round is
            # surely past its prefill (one event per token unless a slow reader merged some)
            mid = [(t[96] - t[32]) / 64 * 1e3 for t in res if t and len(t) > 96]
            tp = []
            for times in res:
                # events: one per step's new text (tokens a slow reader missed come together),
                # the last with the finish reason: first to last is the 127 tokens after the first
                if len(times) >= 2:
                    tp.append((times[-1] - times[0]) / (NEW - 1) * 1e3)
            assert tp, "no stream gave its tokens"
            per.append(((m1[0] - m0[0]) / max(m1[1] - m0[1], 1) * 1e3, statistics.median(tp),
                        statistics.median(mid) if mid else 0,
                        (s1[0] - s0[0]) / steps * 1e3, s1[1] - s0[1], wall / steps * 1e3))
        med = lambda i: statistics.median(r[i] for r in per)
        # the model's own time per step (rg_gen_engine_step_run), the round's wall clock per
        # step (the difference: the server's work between steps and the arrivals' spread)
        STEP["server_step_ms"] = med(3)
        STEP["server_steps"] = med(4)
        STEP["server_wall_per_step_ms"] = med(5)
        STEP["server_client_steady_ms"] = med(2)
        SAMPLES["server"] = [round(r[0], 4) for r in per]
        SAMPLES["server_steady"] = [round(r[2], 4) for r in per]
        return med(0), med(1)
    finally:
        srv.terminate()
        try:
            srv.wait(30)
        except subprocess.TimeoutExpired:
            srv.kill()
        if TRACE.get("file") and os.path.exists(TRACE["file"]) and STEP.get("server_steps"):
            STEP.update(trace_summary(TRACE["file"], STEP["server_steps"], n))


def main():
    a = argparse.ArgumentParser()
    a.add_argument("out")
    a.add_argument("--model", required=True)
    a.add_argument("--device", default="cuda")
    a.add_argument("--batches", default="1,16,64")
    a.add_argument("--label", default="")
    a.add_argument("--only", default="cli,python,server")
    a.add_argument("--server-args", default="", help="more `ragged serve` options")
    a.add_argument("--trace-dir", default="", help="the server writes --trace-steps files "
                   "here; their medians go in the rows (trace_*)")
    o = a.parse_args()
    SERVER_ARGS.extend(o.server_args.split())
    if o.trace_dir:
        os.makedirs(o.trace_dir, exist_ok=True)
        TRACE["dir"] = o.trace_dir
    only = set(o.only.split(","))
    rows = []
    if os.path.exists(o.out):
        with open(o.out) as f:
            rows = json.load(f).get("rows", [])
    for n in [int(x) for x in o.batches.split(",")]:
        row = {"model": o.label or o.model, "device": o.device, "batch": n}
        for name, fn in (("cli", lambda: cli_tpot(o.model, o.device, n)[0]),
                         ("python", lambda: python_tpot(o.model, o.device, n)),
                         ("server", lambda: server_tpot(o.model, o.device, n))):
            if name not in only:
                continue
            try:
                v = fn()
                if name == "server":
                    row["server_client_tpot_ms"] = round(v[1], 4)
                    row["server_step_ms"] = round(STEP.get("server_step_ms", 0), 4)
                    row["server_steps"] = STEP.get("server_steps", 0)
                    for k in ("server_wall_per_step_ms", "server_client_steady_ms"):
                        row[k] = round(STEP.get(k, 0), 4)
                    row.update({k: v for k, v in STEP.items() if k.startswith("trace_")})
                    if o.server_args:
                        row["server_args"] = o.server_args
                    v = v[0]
                row[name + "_tpot_ms"] = round(v, 4)
            except Exception as e:  # recorded, the other cells go on
                row[name + "_error"] = repr(e)[-500:]
        row["reps"] = REPS
        row["samples"] = dict(SAMPLES)
        SAMPLES.clear()
        v = [row[k] for k in ("cli_tpot_ms", "python_tpot_ms", "server_tpot_ms") if k in row]
        if len(v) == 3 and min(v) > 0:
            row["spread"] = round(max(v) / min(v) - 1, 4)
            # the server's steady decode (every stream past its prefill) in place of its
            # whole-request TPOT, which includes the prefills of the streams that arrived
            # after it (the client starts N threads; the CLI and Python admit all at once)
            w = v[:2] + [row.get("server_client_steady_ms", 0)]
            if min(w) > 0:
                row["steady_spread"] = round(max(w) / min(w) - 1, 4)
            row["tok_s_python"] = round(n * 1e3 / row["python_tpot_ms"], 1)
        print(json.dumps(row), flush=True)
        rows.append(row)
        with open(o.out, "w") as f:
            json.dump({"what": "issue 27: per-token time of the CLI, the Python API and the "
                               "server (one engine)",
                       "commit": os.environ.get("RAGGED_COMMIT", "unknown"),
                       "gpu": os.environ.get("RAGGED_GPU", ""),
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "new_tokens": NEW, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
