"""One server, several devices (issue 9, item 17): `--devices 0,1` loads the model on each GPU and
runs one engine worker per device behind the one admission queue. CI has no GPU, so these tests
run the same engine with CPU models (`--cpu-replicas N`, a testing option); the GPU run is
tests/gpu/multi_gpu.sh on a 2-GPU machine (bench/results/multi_gpu_*; its log is in
tests/gpu/results/).

With a simulated slow device (--token-delay-us: a sleep per computed token, outside the engine
lock, as a GPU's time would be), two workers overlap their batches, so the tests can see that:

- the pieces of one request run on both devices at once and come back equal to the library's
  vectors; /metrics counts batches and tokens per device; /info lists the devices;
- a request whose deadline passes, or whose client goes away, while some of its pieces run on the
  other device is ended without a use-after-free (the ASan pass runs this file) and the server
  keeps serving;
- SIGTERM drains the shared queue on both devices;
- bad --devices values and combinations are refused by name."""
import asyncio
import json
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

from ragged_ctypes import Model
from server_util import ASAN, BIN_PATH, Server, hf_tokenizer, http_request_bytes, server_env, \
    status_of, tiny_model

DELAY = ["--token-delay-us", 500, "--cache-entries", 0, "--device", "cpu"]
LONG = " ".join(["hello"] * 118)   # 120 tokens with [CLS] and [SEP]: a 60 ms piece
PIECE_MS = 120 * 0.5


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("devices_tiny")), "h32_gelu")


@pytest.fixture(scope="module")
def lib_model(tiny_dir):
    m = Model(tiny_dir)
    yield m
    m.close()


@pytest.fixture(scope="module")
def hf_tok(tiny_dir):
    return hf_tokenizer(tiny_dir)


@pytest.fixture(scope="module")
def long_ids(tiny_dir):
    s = Server(tiny_dir, "--device", "cpu")
    try:
        st, toks = s.post_json("/tokenize", {"inputs": [LONG]})
    finally:
        s.stop()
    assert st == 200 and len(toks[0]) == 120
    return [t["id"] for t in toks[0]]


def _cuda_devices():
    import ragged_ctypes as rc
    return rc.lib().rg_cuda_device_count()


def device_counts(m, name):
    return {k.split('"')[1]: v for k, v in m.items() if k.startswith(name + "{")}


def test_one_request_runs_on_both_devices(tiny_dir, long_ids, lib_model):
    """16 pieces of 60 ms with a 100 ms batch budget: one device needs >= 960 ms; two take the
    batches in turn and overlap, so the request ends well before that, and each device ran
    some of its pieces. The vectors equal the library's in one batch."""
    s = Server(tiny_dir, *DELAY, "--cpu-replicas", 2)
    try:
        st, info = s.request("GET", "/info")[0], json.loads(s.request("GET", "/info")[2])
        assert st == 200 and info["devices"] == ["cpu:0", "cpu:1"]
        t0 = time.monotonic()
        st, h, data = s.post("/embed", {"inputs": [LONG] * 16, "normalize": False})
        ms = (time.monotonic() - t0) * 1e3
        assert st == 200, data
        m = s.metrics()
        batches = device_counts(m, "ragged_device_batches_total")
        tokens = device_counts(m, "ragged_device_tokens_total")
        assert set(batches) == {"cpu:0", "cpu:1"}, batches
        assert min(batches.values()) >= 2, batches
        assert sum(batches.values()) == m["ragged_batches_total"]
        assert sum(tokens.values()) == 16 * 120 and min(tokens.values()) >= 2 * 120, tokens
        # the CPU backend captures no CUDA graphs and builds no GEMM plans; the series are
        # there per device
        for name in ("ragged_device_graph_captures_total", "ragged_device_graphs_warm",
                     "ragged_device_graph_replays_total", "ragged_device_eager_batches_total",
                     "ragged_device_gemm_plans_total"):
            assert device_counts(m, name) == {"cpu:0": 0, "cpu:1": 0}, name
        assert ms < 0.8 * 16 * PIECE_MS, f"{ms:.0f} ms: the two devices did not overlap"
        ref = lib_model.embed_ids([long_ids] * 16, 32)
        np.testing.assert_allclose(np.array(json.loads(data)), ref, rtol=1e-5, atol=2e-6)
    finally:
        s.stop()


async def _client(port, body):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(http_request_bytes("/embed", body, keep_alive=False))
    await w.drain()
    data = await r.read()
    w.close()
    head, _, out = data.partition(b"\r\n\r\n")
    return status_of(head), out


def test_concurrent_requests_over_three_devices(tiny_dir, lib_model, hf_tok):
    """Many clients at once, each with several inputs (pieces that may land on different
    devices): every answer is 200 with the library's vectors, in the client's input order."""
    n = 60 if ASAN else 200
    texts = [[f"client {i} input {k} says {(i * 7919 + k) % 1000}" for k in range(3)]
             for i in range(n)]
    s = Server(tiny_dir, "--device", "cpu", "--cpu-replicas", 3, "--cache-entries", 0,
               "--max-batch-requests", 8, "--max-queue", 4096)
    try:
        async def main():
            return await asyncio.gather(*[_client(s.port, {"inputs": t, "normalize": False})
                                          for t in texts])
        res = asyncio.run(main())
        assert [st for st, _ in res] == [200] * n
        got = np.array([json.loads(b) for _, b in res], np.float32).reshape(n * 3, -1)
        flat = [t for ts in texts for t in ts]
        ref = np.concatenate([lib_model.embed_ids([hf_tok.encode(t).ids for t in flat[i:i + 96]],
                                                  32) for i in range(0, len(flat), 96)])
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        m = s.metrics()
        assert sum(device_counts(m, "ragged_device_tokens_total").values()) == \
            m["ragged_real_tokens_total"]
    finally:
        s.stop()


def test_deadline_passes_while_pieces_run_on_the_other_device(tiny_dir):
    """A 16-piece request with a 300 ms timeout, admitted by count: it expires while a piece runs
    on one device and the other device's worker ends it; its answer (504) waits for that piece to
    return (the piece writes into the request's memory). The server keeps serving."""
    s = Server(tiny_dir, *DELAY, "--cpu-replicas", 2, "--admission", "count",
               "--request-timeout-ms", 300)
    try:
        t0 = time.monotonic()
        st, h, data = s.post("/embed", {"inputs": [LONG] * 16})
        ms = (time.monotonic() - t0) * 1e3
        assert st == 504, data
        assert json.loads(data)["error_type"] == "timeout"
        assert ms < 300 + 2 * PIECE_MS + 200, f"504 after {ms:.0f} ms"
        m = s.metrics()
        assert m["ragged_expired_total"] == 1
        assert m["ragged_batches_total"] < 16
        st, out = s.post_json("/embed", {"inputs": ["still serving", "on both"]})
        assert st == 200 and len(out) == 2
    finally:
        s.stop()


def test_client_gone_while_pieces_run(tiny_dir):
    """The client of a 24-piece request closes its socket after 150 ms: the request is dropped
    (its remaining pieces never run), nothing is answered to a closed socket, the server serves
    the next request and exits clean (ASan: no leak, no use-after-free)."""
    s = Server(tiny_dir, *DELAY, "--cpu-replicas", 2, "--admission", "count")
    try:
        sock = socket.create_connection(("127.0.0.1", s.port))
        sock.sendall(http_request_bytes("/embed", {"inputs": [LONG] * 24}, keep_alive=False))
        time.sleep(0.15)
        sock.close()
        end = time.monotonic() + 10
        while time.monotonic() < end and s.metrics()["ragged_dropped_disconnected_total"] < 1:
            time.sleep(0.01)
        m = s.metrics()
        assert m["ragged_dropped_disconnected_total"] == 1
        time.sleep(3 * PIECE_MS / 1e3)  # the pieces in flight return
        assert s.metrics()["ragged_batches_total"] < 24
        st, out = s.post_json("/embed", {"inputs": "next"})
        assert st == 200 and len(out) == 1
    finally:
        s.stop()


def test_sigterm_drains_both_devices(tiny_dir):
    """8 requests of 4 pieces queued, then SIGTERM: both devices work the queue off, every
    request is answered 200, the process exits 0."""
    s = Server(tiny_dir, *DELAY, "--cpu-replicas", 2, "--shutdown-timeout-s", 5)
    rc = None
    try:
        body = json.dumps({"inputs": [LONG] * 4}).encode()
        socks = []
        for _ in range(8):
            c = socket.create_connection(("127.0.0.1", s.port))
            c.sendall(b"POST /embed HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                      b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            socks.append(c)
        end = time.monotonic() + 10
        while time.monotonic() < end and s.metrics()["ragged_batches_total"] < 1:
            time.sleep(0.01)
        s.proc.send_signal(signal.SIGTERM)
        codes = []
        for c in socks:
            c.settimeout(30)
            data = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
            c.close()
            codes.append(status_of(data))
        rc = s.proc.wait(30)
        assert codes == [200] * 8, codes
        assert rc == 0, s.stderr()
    finally:
        s.stop(expect_rc=rc if rc is not None else 0)


@pytest.mark.parametrize("args,env,needle", [
    (["--devices", "0,0"], {}, "--devices"),
    (["--devices", "0,x"], {}, "--devices"),
    (["--devices", ""], {}, "--devices"),
    (["--devices", "0,1", "--device", "cpu"], {}, "--devices"),
    ([], {"RAGGED_DEVICES": "1,-2"}, "RAGGED_DEVICES"),
    (["--devices", "all"], {}, "no CUDA device is visible"),  # CI: no GPU
    (["--devices", "all", "--device", "cpu"], {}, "--devices"),
    (["--cpu-replicas", "2"], {}, "--cpu-replicas needs --device cpu"),
    (["--device", "cpu", "--cpu-replicas", "17"], {}, "--cpu-replicas"),
])
def test_bad_devices_refused(tiny_dir, args, env, needle):
    if args == ["--devices", "all"] and _cuda_devices() > 0:
        pytest.skip("a GPU is visible here: --devices all is valid")
    p = subprocess.run([BIN_PATH, "serve", "--model", tiny_dir, "--port", "0", *args],
                       capture_output=True, text=True, timeout=60, env={**server_env(), **env})
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert needle in p.stderr, p.stderr


def test_devices_without_a_gpu_names_the_device(tiny_dir):
    """--devices on a machine without that GPU (or a CPU-only build): exit 1 naming the device."""
    p = subprocess.run([BIN_PATH, "serve", "--model", tiny_dir, "--port", "0", "--devices", "7"],
                       capture_output=True, text=True, timeout=60, env=server_env())
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "on cuda:7" in p.stderr, p.stderr
