"""`ragged loadgen` against a Python stub of the ragged HTTP API (http.server on loopback).

The stub is the independent reference: it records every request body it received and every status
it answered, and the loadgen's report must agree with those records (counts, error codes, lengths);
latencies must be at least the stub's fixed service delay; the open-loop test checks that waiting
for a connection is charged to latency (no coordinated omission).
"""
import json
import math
import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from ragged_ctypes import BIN_PATH

QUEUE_MS, INFER_MS, TOTAL_MS, BATCH = 1.25, 2.5, 3.75, 3


class Stub:
    """Configurable fake server. Modes are decided from the server-side request counter."""

    def __init__(self, delay_s=0.0, error_every=0, error_code=503, close_every=0, chunked=False,
                 drop_all=False):
        self.delay_s = delay_s
        self.error_every = error_every
        self.error_code = error_code
        self.close_every = close_every
        self.chunked = chunked
        self.drop_all = drop_all
        self.lock = threading.Lock()
        self.records = []  # (path, body dict, status) in arrival order
        self.request_ids = []  # the X-Request-Id header of each record (loadgen's request index)
        self.connections = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def setup(self):
                super().setup()
                with stub.lock:
                    stub.connections += 1

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(n)
                body = json.loads(raw)
                with stub.lock:
                    k = len(stub.records) + 1
                    status = stub.error_code if stub.error_every and k % stub.error_every == 0 \
                        else 200
                    if stub.drop_all:
                        status = 0
                    stub.records.append((self.path, body, status))
                    stub.request_ids.append(self.headers.get("X-Request-Id"))
                if stub.drop_all:
                    self.close_connection = True
                    return
                if stub.delay_s:
                    time.sleep(stub.delay_s)
                payload = json.dumps({"object": "list", "data": [
                    {"object": "embedding", "index": 0, "embedding": [0.5] * 8}]}).encode() \
                    if status == 200 else b'{"error": "stub"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("x-queue-time", str(QUEUE_MS))
                self.send_header("x-inference-time", str(INFER_MS))
                self.send_header("x-total-time", str(TOTAL_MS))
                self.send_header("x-batch-size", str(BATCH))
                close = bool(stub.close_every and k % stub.close_every == 0)
                if close:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                if stub.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    # Split in odd pieces and flush between them to exercise partial reads.
                    for i in range(0, len(payload), 7):
                        piece = payload[i:i + 7]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    # Headers and body in two writes: the client must handle split reads.
                    self.wfile.flush()
                    self.wfile.write(payload)

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # listen backlog: bursts of connects must not be dropped

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


def _env():
    env = dict(os.environ)
    # Under the ASan pass the interpreter preloads the runtime; the loadgen binary is instrumented
    # itself and gets full leak checking.
    env.pop("LD_PRELOAD", None)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=1"
    return env


def loadgen(tmp_path, *args, timeout=60):
    out = tmp_path / "lg.json"
    p = subprocess.run([BIN_PATH, "loadgen", *args, "--json", str(out)], capture_output=True,
                       timeout=timeout, env=_env())
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    with open(out) as f:
        res = json.load(f)  # must be well-formed JSON
    return res, p.stdout.decode()


def poisson_bound(lam):
    """Loose two-sided bound (6 standard deviations) on a Poisson count of mean lam."""
    return lam - 6 * math.sqrt(lam) - 2, lam + 6 * math.sqrt(lam) + 2


def check_token_body(body, lo, hi):
    ids = body["input"]
    assert isinstance(ids, list) and len(ids) == 1 and isinstance(ids[0], list)
    ids = ids[0]
    assert lo <= len(ids) <= hi, len(ids)
    assert ids[0] == 101 and ids[-1] == 102
    inner = ids[1:-1]
    assert all(isinstance(t, int) and 1000 <= t < 29000 for t in inner)
    return len(ids)


def test_rate_latency_lengths_headers(tmp_path):
    rate, dur, delay = 150.0, 2.0, 0.02
    with Stub(delay_s=delay) as stub:
        res, table = loadgen(tmp_path, "--url", stub.url, "--rate", str(rate), "--duration",
                             str(dur), "--warmup", "0.3", "--connections", "32",
                             "--dist", "uniform:2:100", "--seed", "7")
        recs = list(stub.records)
    n = res["requests"]["scheduled"]
    lo, hi = poisson_bound(rate * dur)
    assert lo <= n <= hi, (n, lo, hi)
    lo_w, hi_w = poisson_bound(rate * 0.3)
    assert lo_w <= res["requests"]["warmup"] <= hi_w
    # The stub saw every request exactly once (warmup included), all on the route.
    assert len(recs) == n + res["requests"]["warmup"]
    assert all(path == "/v1/embeddings" for path, _, _ in recs)
    assert res["requests"]["ok"] == n and res["requests"]["failed"] == 0
    assert res["errors"]["status"] == {}
    assert all(v == 0 for v in res["errors"]["transport"].values())
    # Latency from the scheduled send time can never be below the service delay.
    lat = res["latency_ms"]
    assert lat["min"] >= delay * 1e3
    assert delay * 1e3 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert lat["p50"] < delay * 1e3 + 500, "32 connections are plenty: no queueing expected"
    # Offered rate is the Poisson realisation; throughput close to it for an unsaturated stub.
    assert abs(res["offered_rps"] - n / dur) < 1e-6 * n
    assert 0.7 * rate <= res["throughput_rps"] <= 1.3 * rate
    # Server headers are averaged exactly.
    srv = res["server"]
    assert srv["queue_ms_mean"] == pytest.approx(QUEUE_MS)
    assert srv["inference_ms_mean"] == pytest.approx(INFER_MS)
    assert srv["total_ms_mean"] == pytest.approx(TOTAL_MS)
    assert srv["batch_size_mean"] == pytest.approx(BATCH)
    # Lengths in the bodies follow uniform[2, 100] (inclusive) with its mean 51.
    lens = np.array([check_token_body(b, 2, 100) for _, b, _ in recs])
    assert abs(lens.mean() - 51.0) < 6 * 28.3 / math.sqrt(len(lens)) + 0.5
    assert lens.min() <= 10 and lens.max() >= 90
    assert all("deadline_ms" not in b for _, b, _ in recs)
    assert res["length"]["min"] >= 2 and res["length"]["max"] <= 100
    assert "latency ms" in table and "throughput" in table


def test_status_errors_close_and_chunked(tmp_path):
    # Every 4th request gets 503; every 3rd response closes the connection (the client must
    # reconnect); bodies arrive chunked in 7-byte pieces.
    with Stub(error_every=4, error_code=503, close_every=3, chunked=True) as stub:
        res, _ = loadgen(tmp_path, "--url", stub.url, "--rate", "200", "--requests", "120",
                         "--connections", "8", "--seed", "3")
        recs = list(stub.records)
    assert len(recs) == 120
    n503 = sum(1 for _, _, s in recs if s == 503)
    assert n503 == 30
    assert res["requests"]["scheduled"] == 120
    assert res["errors"]["status"] == {"503": n503}
    assert res["requests"]["ok"] == 120 - n503
    assert res["requests"]["failed"] == n503
    assert all(v == 0 for v in res["errors"]["transport"].values()), res["errors"]
    assert stub.connections >= 120 // 3, "closed connections must have been reopened"


def test_normal_dist_deadline_and_ids(tmp_path):
    with Stub() as stub:
        res, _ = loadgen(tmp_path, "--url", stub.url, "--rate", "400", "--requests", "400",
                         "--dist", "normal:20:20:3:100", "--deadline-ms", "250",
                         "--seed", "11")
        recs = list(stub.records)
    assert len(recs) == 400
    assert all(b["deadline_ms"] == 250 for _, b, _ in recs)
    lens = np.array([check_token_body(b, 3, 100) for _, b, _ in recs])
    # Independent reference: mean of round(N(20, 20)) clipped to [3, 100], by NumPy sampling.
    rng = np.random.default_rng(0)
    ref = np.clip(np.rint(rng.normal(20, 20, 2_000_000)), 3, 100)
    se = ref.std() / math.sqrt(len(lens))
    assert abs(lens.mean() - ref.mean()) < 6 * se, (lens.mean(), ref.mean())
    # The clip at 3 holds ~20% of the mass.
    frac3 = float((lens == 3).mean())
    assert abs(frac3 - float((ref == 3).mean())) < 0.08
    assert res["deadline_ms"] == 250
    assert res["deadline_met"] <= res["requests"]["ok"]
    util = sum(1.0 / x for x in lens)
    if res["deadline_met"] == res["requests"]["ok"]:
        assert res["utility"] == pytest.approx(util, rel=1e-4)


def test_file_dist_text_on_embed_route(tmp_path):
    lines = ["the cat sat on the mat", "a \"quoted\" line with \\ backslash", "short",
             "unicode caf\u00e9 na\u00efve"]
    f = tmp_path / "texts.txt"
    f.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    with Stub() as stub:
        res, _ = loadgen(tmp_path, "--url", stub.url, "--route", "/embed", "--rate", "300",
                         "--requests", "60", "--dist", f"file:{f}")
        recs = list(stub.records)
    assert len(recs) == 60
    seen = set()
    for path, body, _ in recs:
        assert path == "/embed"
        assert isinstance(body["inputs"], list) and len(body["inputs"]) == 1
        assert body["inputs"][0] in lines
        seen.add(body["inputs"][0])
    assert len(seen) == len(lines)
    assert res["requests"]["ok"] == 60


def test_embed_route_length_dist_sends_words(tmp_path):
    with Stub() as stub:
        loadgen(tmp_path, "--url", stub.url, "--route", "/embed", "--rate", "300",
                "--requests", "50", "--dist", "uniform:5:40")
        recs = list(stub.records)
    for _, body, _ in recs:
        words = body["inputs"][0].split()
        assert 3 <= len(words) <= 38  # drawn length minus [CLS] and [SEP]
        assert all(w.isalpha() and w.islower() for w in words)


def test_open_loop_charges_client_queueing(tmp_path):
    # One connection, 100 ms service, ~20 req/s for 1 s: the server can do 10/s, so requests
    # wait for the connection. Latency runs from the scheduled time, so the last requests see
    # roughly n * 100 ms - 1 s. A closed-loop client would report ~100 ms.
    delay = 0.1
    with Stub(delay_s=delay) as stub:
        res, _ = loadgen(tmp_path, "--url", stub.url, "--rate", "20", "--duration", "1",
                         "--connections", "1", "--seed", "5")
        recs = list(stub.records)
    n = res["requests"]["scheduled"]
    assert len(recs) == n and res["requests"]["ok"] == n
    assert n >= 8
    assert res["latency_ms"]["max"] >= 0.9 * (n * delay * 1e3 - 1000)
    assert res["send_lag_ms"]["max"] >= 0.9 * ((n - 1) * delay * 1e3 - 1000)
    assert res["throughput_rps"] <= 1.0 / delay * 1.1


def test_throughput_is_in_window_rate_not_drain_tail(tmp_path):
    # 0.5 s service, 1 s window after 1 s warm-up: in steady state ~rate responses complete per
    # second of the window. Dividing the measured successes by the span up to the last one
    # (completion_rps) would include the 0.5 s drain tail and read ~rate / 1.5.
    rate = 200.0
    with Stub(delay_s=0.5) as stub:
        res, _ = loadgen(tmp_path, "--url", stub.url, "--rate", str(rate), "--duration", "1",
                         "--warmup", "1", "--connections", "400", "--seed", "2")
        n_stub = len(stub.records)
    assert n_stub == res["requests"]["scheduled"] + res["requests"]["warmup"]
    assert res["requests"]["ok"] == res["requests"]["scheduled"]
    assert 0.75 * rate <= res["throughput_rps"] <= 1.25 * rate
    assert res["completion_rps"] < 0.8 * res["offered_rps"]
    assert res["latency_ms"]["min"] >= 500


def test_transport_errors_counted(tmp_path):
    with Stub(drop_all=True) as stub:
        res, _ = loadgen(tmp_path, "--url", stub.url, "--rate", "100", "--requests", "20",
                         "--connections", "4")
    assert res["requests"]["ok"] == 0
    assert res["errors"]["transport"]["closed"] == 20
    assert res["requests"]["failed"] == 20
    # A port nobody listens on: every request is a connect error, and the run still ends.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    res, _ = loadgen(tmp_path, "--url", f"http://127.0.0.1:{port}", "--rate", "100",
                     "--requests", "15")
    assert res["errors"]["transport"]["connect"] == 15
    assert res["latency_ms"]["p50"] is None


def test_timeout_bounds_the_run(tmp_path):
    with Stub(delay_s=3.0) as stub:
        t0 = time.monotonic()
        res, _ = loadgen(tmp_path, "--url", stub.url, "--rate", "50", "--requests", "5",
                         "--timeout-ms", "300")
        took = time.monotonic() - t0
    assert res["errors"]["transport"]["timeout"] == 5
    assert took < 2.5


@pytest.mark.parametrize("args", [
    ["--rate", "0"], ["--dist", "uniform:1:5"], ["--dist", "normal:20:20"],
    ["--dist", "zipf:1"], ["--url", "ftp://x"], ["--duration", "1", "--requests", "3"],
    ["--connections", "0"], ["--bogus"],
])
def test_bad_usage(args):
    p = subprocess.run([BIN_PATH, "loadgen", *args], capture_output=True, timeout=30, env=_env())
    assert p.returncode == 2
    assert p.stderr.strip()


@pytest.mark.parametrize("dist,seed", [("uniform:2:100", 1), ("normal:20:20:3:100", 7)])
def test_offline_bench_reproduces_the_request_stream(tmp_path, dist, seed):
    """bench/serving/offline_embed.py times the engine on the requests the loadgen sends,
    reimplemented in Python (xoshiro256**, the schedule's draws, per-request id
    streams). Each body the stub received, keyed by its X-Request-Id, must equal the Python
    request of that index, and every length of --per-request must equal the Python length."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "bench", "serving"))
    import offline_embed
    n = 60
    per_req = tmp_path / "pr.jsonl"
    with Stub() as stub:
        res, _ = loadgen(tmp_path, "--url", stub.url, "--rate", "400", "--requests", str(n),
                         "--warmup", "0.02", "--connections", "4", "--dist", dist,
                         "--seed", str(seed), "--per-request", str(per_req), "--quiet")
    got = {int(i): body["input"][0] for i, (_, body, _) in zip(stub.request_ids, stub.records)}
    lens = {r["i"]: r["len"] for r in map(json.loads, open(per_req))}
    assert len(got) >= n and set(got) == set(lens)
    want = offline_embed.loadgen_requests(dist, seed, max(got) + 1)
    assert [len(want[i]) for i in sorted(lens)] == [lens[i] for i in sorted(lens)]
    for i, ids in got.items():
        assert ids == want[i], f"request {i}"
    # the ids are the loadgen's default range and the Python packer keeps them as they are
    flat, cu = offline_embed.pack([want[i] for i in sorted(got)])
    assert cu[-1] == sum(lens.values()) and flat.dtype == np.int32
    assert all(1000 <= x < 29000 for q in want for x in q[1:-1])
