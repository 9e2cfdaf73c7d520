"""`ragged serve` with a decoder under abuse and at shutdown (issue 28, the server's side), on the
tiny random GPT-2 of make_chat_decoder.py:

- a request of more sequences than the generation queue holds (2,048 prompts x n = 16) is
  refused at once with 413 naming the limit and no Retry-After, and one that does not fit now is
  refused whole (429 + Retry-After) with nothing of it left queued, so a client sending such
  requests every 0.3 s does not wedge the queue: >= 95% of the honest requests meanwhile are
  served;
- streamed responses are counted in ragged_requests_total and the stop line;
- /metrics parses as Prometheus text (a strict parser here; prometheus_client's too where it is
  installed) and carries vLLM's and TGI's names beside ragged's, whose values move with a
  request;
- SIGTERM during a long prefill (--step-delay-ms makes every step slow) stops within
  --shutdown-timeout-s plus about one step, whether the streaming client stays or is gone, and a
  client that stays gets an error event and the end of the stream, not a hang; a client that
  leaves during it has its request aborted at the next step boundary."""
import json
import re
import signal
import socket
import threading
import time

import pytest

import make_chat_decoder
from server_util import ASAN, Server, parse_metrics

HONEST = {"prompt": "Hello, world!", "max_tokens": 4, "ignore_eos": True}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_chat_decoder.make(str(tmp_path_factory.mktemp("chatdec_ops") / "m"), seed=7)


def post(s, body, path="/v1/completions", timeout=60):
    st, h, data = s.post(path, body, timeout=timeout)
    return st, h, data


def waiting(s):
    return s.metrics()["ragged_gen_num_requests_waiting"]


def stream_raw(s, body, path="/v1/completions"):
    """A streaming request over a raw socket: -> the socket, once the first bytes of the answer
    (the status line) have come."""
    b = json.dumps(body).encode()
    so = socket.create_connection((s.host, s.port), timeout=120)
    so.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
               b"application/json\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
    return so


def read_all(so, timeout):
    """Everything the server sends until it closes or ends the chunked body; None on a hang."""
    so.settimeout(timeout)
    got = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            chunk = so.recv(65536)
        except socket.timeout:
            return None
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += chunk
        if got.endswith(b"\r\n0\r\n\r\n"):
            break
    return got


# ---- a refused fan-out request leaves nothing queued ------------------------------------------

def test_fanout_never_fits_413(model_dir):
    """2,048 prompts x n = 16 is 32,768 sequences against a queue of 2,048 (--max-queue, raised
    to --max-inputs): 413 naming the limit, no Retry-After, nothing queued; one of 128 x 16 =
    2,048 fits the limit exactly and is served."""
    s = Server(model_dir)
    try:
        st, h, data = post(s, {"prompt": ["Hello"] * 2048, "n": 16, "max_tokens": 2})
        assert st == 413, data
        assert "retry-after" not in h
        err = json.loads(data)["error"]
        assert "32768 sequences" in err["message"] and "at most 2048" in err["message"], err
        assert "--max-queue" in err["message"]
        assert waiting(s) == 0
        st, h, data = post(s, {"prompt": ["Hello"] * 128, "n": 16, "max_tokens": 1}, timeout=120)
        assert st == 200, data
        assert len(json.loads(data)["choices"]) == 2048
    finally:
        s.stop()


def test_fanout_refused_whole_leaves_nothing_queued(model_dir):
    """A request that fits the queue's limit but not its room now: 429 with Retry-After, refused
    whole. The queue then holds what it held before (before issue 28 the prompts added ahead of
    the refused one stayed queued until the next step cancelled them); when the long request
    is cancelled, the queue is empty."""
    # one sequence runs at a time, 60 ms a step: the first request's 79 other sequences wait
    s = Server(model_dir, "--max-queue", 100, "--max-num-seqs", 1, "--step-delay-ms", 60)
    try:
        so = stream_raw(s, {"prompt": ["Hello"] * 5, "n": 16, "max_tokens": 200,
                            "ignore_eos": True, "stream": True})
        assert so.recv(12).startswith(b"HTTP/1.1 200")
        end = time.monotonic() + 20
        while waiting(s) != 79 and time.monotonic() < end:  # the first one runs
            time.sleep(0.02)
        before = waiting(s)
        assert before == 79, before
        # 2 prompts x 16: the first would fit (79 + 16 <= 100), the second not
        st, h, data = post(s, {"prompt": ["Hi", "Ho"], "n": 16, "max_tokens": 2})
        assert st == 429, data
        assert int(h["retry-after"]) >= 1
        # nothing of it is left: the waiting sequences are the first request's (and they only
        # leave the queue: one sequence runs at a time, for 200 steps)
        assert waiting(s) <= before
        so.close()  # the long request's client goes: its sequences are aborted
        end = time.monotonic() + 20
        while waiting(s) and time.monotonic() < end:
            time.sleep(0.05)
        assert waiting(s) == 0
        # the same request fits now
        st, h, data = post(s, {"prompt": ["Hi", "Ho"], "n": 16, "max_tokens": 1}, timeout=60)
        assert st == 200, data
    finally:
        s.stop()


def test_queue_wedge_attack(model_dir):
    """While a client sends a 2,048 x 16 request every 0.3 s, honest requests (one at a time,
    for about 8 s) are served: >= 95% get 200. Every attack request gets 413 or 429, and
    afterwards nothing is queued. Steps of 50 ms (--step-delay-ms): before issue 28 the jobs of
    an attack request stayed queued until the next step cancelled them, and the honest requests
    that came meanwhile were refused."""
    s = Server(model_dir, "--step-delay-ms", 50)
    stop = threading.Event()
    attack = []

    def attacker():
        body = {"prompt": ["Hello, world!"] * 2048, "n": 16, "max_tokens": 16}
        while not stop.is_set():
            t0 = time.monotonic()
            st, h, data = post(s, body, timeout=60)
            attack.append((st, h))
            stop.wait(max(0.0, 0.3 - (time.monotonic() - t0)))

    try:
        th = threading.Thread(target=attacker, daemon=True)
        th.start()
        honest = []
        end = time.monotonic() + 8
        while time.monotonic() < end or len(honest) < 20:
            st, h, data = post(s, HONEST, timeout=60)
            honest.append(st)
            time.sleep(0.05)
            if len(honest) >= 400:
                break
        stop.set()
        th.join(60)
        assert attack, "the attacker sent nothing"
        assert all(st in (413, 429) for st, _ in attack), [st for st, _ in attack]
        assert all("retry-after" not in h for st, h in attack if st == 413)
        served = sum(1 for st in honest if st == 200)
        assert served >= 0.95 * len(honest), (served, len(honest), honest)
        assert waiting(s) == 0
    finally:
        s.stop()


# ---- streams are counted ----------------------------------------------------------------------

def test_streams_counted(model_dir):
    """Streams count in ragged_requests_total when they end (200), as whole answers do; a stream
    whose client leaves counts too (code "other", not 200); the stop line counts them all."""
    s = Server(model_dir, "--step-delay-ms", 5)
    try:
        n_stream = 6
        for i in range(n_stream):
            st, _, data = post(s, {**HONEST, "stream": True})
            assert st == 200 and data.rstrip().endswith(b"data: [DONE]"), data[-100:]
        st, _, data = post(s, {"inputs": "Hello", "parameters": {"max_new_tokens": 3}},
                           path="/generate_stream")
        assert st == 200
        st, _, _ = post(s, HONEST)
        assert st == 200
        m = s.metrics()
        assert m['ragged_requests_total{route="v1_completions",code="200"}'] == n_stream + 1
        assert m['ragged_requests_total{route="generate",code="200"}'] == 1
        # a stream whose client goes away mid-way: counted, not as a 200
        so = stream_raw(s, {"prompt": "Hello", "max_tokens": 200, "ignore_eos": True,
                            "stream": True})
        assert so.recv(100)
        so.close()
        end = time.monotonic() + 20
        key = 'ragged_requests_total{route="v1_completions",code="other"}'
        while s.metrics().get(key, 0) < 1 and time.monotonic() < end:
            time.sleep(0.05)
        m = s.metrics()
        assert m.get(key) == 1, {k: v for k, v in m.items() if "requests_total" in k}
        assert m['ragged_requests_total{route="v1_completions",code="200"}'] == n_stream + 1
    finally:
        s.stop()
    # 8 answers 200 (6 + 1 streams, 1 whole), the cut stream, and the 3 /metrics reads at least
    line = [ln for ln in s.stderr().splitlines() if "answered" in ln][-1]
    total, ok = map(int, re.search(r"answered (\d+) requests, (\d+) of them 200", line).groups())
    assert ok >= 8 + 3 and total >= ok + 1, line


# ---- /metrics: Prometheus text, with vLLM's and TGI's names --------------------------------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABELS = r'\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:\\.|[^"\\\n])*",?)*\}'
SAMPLE = re.compile(rf"^({NAME})({LABELS})? (\S+)(?: -?\d+)?$")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def parse_strict(text):
    """The text exposition format 0.0.4, checked strictly: every line a comment, HELP, TYPE or
    sample of valid names, labels and float value; one TYPE per family, before its samples;
    a family's samples together; no sample twice; histograms' buckets cumulative, with +Inf
    equal to _count. -> {'name{labels}': value}."""
    out, types, seen_family, current = {}, {}, set(), None
    assert text.endswith("\n")
    for ln in text.splitlines():
        if ln.startswith("# HELP ") or ln.startswith("# TYPE "):
            parts = ln.split(" ", 3)
            assert len(parts) >= 3 and re.fullmatch(NAME, parts[2]), ln
            if parts[1] == "TYPE":
                assert len(parts) == 4 and parts[3] in TYPES, ln
                assert parts[2] not in types and parts[2] not in seen_family, ln
                types[parts[2]] = parts[3]
            continue
        if ln.startswith("#"):
            continue
        m = SAMPLE.match(ln)
        assert m, f"not a sample line: {ln!r}"
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        float(value)  # +Inf, -Inf, NaN included
        family = name
        for suf in ("_bucket", "_sum", "_count"):
            if name.endswith(suf) and types.get(name[: -len(suf)]) == "histogram":
                family = name[: -len(suf)]
        if types.get(name) == "histogram":
            raise AssertionError(f"histogram {name} sampled without _bucket/_sum/_count")
        if family != current:
            assert family not in seen_family, f"{family}'s samples are not together"
            seen_family.add(family)
            current = family
        key = name + labels
        assert key not in out, f"sample twice: {key}"
        out[key] = float(value)
    for fam, t in types.items():
        if t != "histogram":
            continue
        series = {}
        for k, v in out.items():
            if k.startswith(fam + "_bucket{"):
                lab = k[len(fam) + 8:-1]
                le = re.search(r'le="([^"]*)"', lab).group(1)
                rest = re.sub(r',?le="[^"]*"', "", lab)
                series.setdefault(rest, []).append((float(le), v))
        assert series, f"histogram {fam} has no buckets"
        for rest, b in series.items():
            assert [x for x, _ in b] == sorted(x for x, _ in b), (fam, b)
            assert all(b[i][1] <= b[i + 1][1] for i in range(len(b) - 1)), (fam, b)
            assert b[-1][0] == float("inf"), (fam, b)
            cnt = out[f"{fam}_count{{{rest}}}" if rest else f"{fam}_count"]
            assert b[-1][1] == cnt, (fam, b, cnt)
    return out


VLLM = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total"]
VLLM_HIST = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
             "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds",
             "vllm:request_queue_time_seconds", "vllm:request_prompt_tokens",
             "vllm:request_generation_tokens"]
TGI = ["tgi_request_count", "tgi_request_success", "tgi_request_failure",
       "tgi_batch_current_size", "tgi_batch_current_max_tokens", "tgi_queue_size"]
TGI_HIST = ["tgi_request_duration", "tgi_request_queue_duration", "tgi_request_input_length",
            "tgi_request_generated_tokens", "tgi_request_mean_time_per_token_duration",
            "tgi_batch_inference_duration"]


def metrics_text(s):
    st, h, data = s.request("GET", "/metrics")
    assert st == 200 and h["content-type"].startswith("text/plain; version=0.0.4")
    return data.decode()


def test_metrics_prometheus_vllm_tgi(model_dir):
    """Every name is there (vLLM's with model_name), the text parses strictly (and with
    prometheus_client where installed), and the values move with one request of 6 tokens; while
    a stream runs, the running gauges and the KV usage say so."""
    s = Server(model_dir, "--step-delay-ms", 20, "--served-model-name", 'tiny "gpt"')
    lab = 'model_name="tiny \\"gpt\\""'
    try:
        text = metrics_text(s)
        a = parse_strict(text)
        try:
            from prometheus_client.parser import text_string_to_metric_families
            fams = {f.name for f in text_string_to_metric_families(text)}
            assert "vllm:num_requests_running" in fams and "tgi_queue_size" in fams, fams
        except ImportError:
            pass
        for n in VLLM:
            assert f"{n}{{{lab}}}" in a, n
        for n in VLLM_HIST:
            assert f"{n}_count{{{lab}}}" in a, n
        for n in TGI:
            assert n in a, n
        for n in TGI_HIST:
            assert f"{n}_count" in a, n
        for r in ("stop", "length", "abort"):
            assert f'vllm:request_success_total{{{lab},finished_reason="{r}"}}' in a
        for m in ("prefill", "decode"):
            assert f'tgi_batch_inference_count{{method="{m}"}}' in a

        st, h, data = post(s, {"prompt": "Hello, world!", "max_tokens": 6, "ignore_eos": True})
        assert st == 200, data
        usage = json.loads(data)["usage"]
        # the answer can reach the client a moment before its connection's completion is
        # counted: read until the request shows (bounded), then check every delta
        for _ in range(100):
            b = parse_strict(metrics_text(s))
            if (b["tgi_request_count"] - a["tgi_request_count"] >= 1 and
                    b[f'vllm:request_success_total{{{lab},finished_reason="length"}}'] -
                    a[f'vllm:request_success_total{{{lab},finished_reason="length"}}'] >= 1):
                break
            time.sleep(0.05)

        def d(k):
            return b[k] - a[k]
        assert d(f"vllm:prompt_tokens_total{{{lab}}}") == usage["prompt_tokens"]
        assert d(f"vllm:generation_tokens_total{{{lab}}}") == 6
        assert d(f'vllm:request_success_total{{{lab},finished_reason="length"}}') == 1
        for n in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                  "vllm:time_per_output_token_seconds", "vllm:request_queue_time_seconds"):
            assert d(f"{n}_count{{{lab}}}") == 1, n
        assert d(f"vllm:inter_token_latency_seconds_count{{{lab}}}") == 5
        assert d(f"vllm:request_prompt_tokens_sum{{{lab}}}") == usage["prompt_tokens"]
        assert d(f"vllm:request_generation_tokens_sum{{{lab}}}") == 6
        assert d(f"vllm:e2e_request_latency_seconds_sum{{{lab}}}") > 0
        assert d("tgi_request_count") == 1 and d("tgi_request_success") == 1
        assert d("tgi_request_failure") == 0
        assert d("tgi_request_duration_count") == 1 and d("tgi_request_duration_sum") > 0
        assert d("tgi_request_input_length_sum") == usage["prompt_tokens"]
        assert d("tgi_request_generated_tokens_sum") == 6
        assert d("tgi_request_mean_time_per_token_duration_count") == 1
        assert d('tgi_batch_inference_count{method="prefill"}') >= 1
        assert d('tgi_batch_inference_count{method="decode"}') >= 5
        # a refused request counts as a TGI failure
        st, _, _ = post(s, {"inputs": "x", "parameters": {"max_new_tokens": 100000}},
                        path="/generate")
        assert st == 422
        for _ in range(100):
            c = parse_strict(metrics_text(s))
            if c["tgi_request_failure"] - b["tgi_request_failure"] >= 1:
                break
            time.sleep(0.05)
        assert c["tgi_request_failure"] - b["tgi_request_failure"] == 1

        # while a stream runs (20 ms steps, 200 tokens)
        so = stream_raw(s, {"prompt": "Hello", "max_tokens": 200, "ignore_eos": True,
                            "stream": True})
        assert so.recv(100)
        # the headers come at admission; the request runs from its first step on
        for _ in range(100):
            r = parse_strict(metrics_text(s))
            if r[f"vllm:num_requests_running{{{lab}}}"] == 1:
                break
            time.sleep(0.05)
        assert r[f"vllm:num_requests_running{{{lab}}}"] == 1
        assert r["tgi_batch_current_size"] == 1
        assert r[f"vllm:kv_cache_usage_perc{{{lab}}}"] > 0
        assert r["tgi_batch_current_max_tokens"] > 0
        so.close()
    finally:
        s.stop()


# ---- shutdown and disconnects during a long prefill -------------------------------------------

STEP_MS = 400        # --step-delay-ms: every step takes at least 0.4 s (the start-up's
                     # warm-up steps too: about 9 of them)
SHUTDOWN_S = 2       # --shutdown-timeout-s
SLACK_S = 2.0        # a loaded 2-core machine, the ASan build
SLOW = ["--step-delay-ms", STEP_MS, "--max-num-batched-tokens", 64, "--shutdown-timeout-s",
        SHUTDOWN_S, "--no-prefix-caching"]


@pytest.fixture(scope="module")
def long_dir(tmp_path_factory):
    """The same tiny GPT-2 with a context of 1,024 positions."""
    return make_chat_decoder.make(str(tmp_path_factory.mktemp("chatdec_long") / "m"), seed=7,
                                  n_pos=1024)


def long_prefill(s):
    """A stream whose prompt of about 950 tokens is prefilled in 64-token chunks, one per step
    (about 6 s before its first token): -> its socket, a chunk or two into its prefill."""
    prompt = " ".join(["Prefix caching reuses the key and value blocks"] * 50)
    so = stream_raw(s, {"prompt": prompt, "max_tokens": 8, "ignore_eos": True, "stream": True})
    assert so.recv(12).startswith(b"HTTP/1.1 200")
    end = time.monotonic() + 20
    while s.metrics()["ragged_gen_steps_total"] < 2 and time.monotonic() < end:
        time.sleep(0.05)
    m = s.metrics()
    assert m["ragged_gen_num_requests_running"] == 1 and m["ragged_gen_generation_tokens_total"] == 0
    return so


@pytest.mark.parametrize("client", ["stays", "gone"])
def test_shutdown_interrupts_a_long_prefill(long_dir, client):
    """SIGTERM during a prefill of 15 steps of 0.4 s: the process exits within
    --shutdown-timeout-s plus one step (and some slack), not after the prefill; a client that
    stays gets an error event, [DONE] and the end of the chunked body."""
    s = Server(long_dir, *SLOW)
    so = long_prefill(s)
    if client == "gone":
        so.close()
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    got = read_all(so, 30) if client == "stays" else b""
    rc = s.proc.wait(60)
    took = time.monotonic() - t0
    s.stop()
    assert rc == 0
    assert took <= SHUTDOWN_S + STEP_MS / 1e3 + SLACK_S, (took, s.stderr()[-1500:])
    if client == "stays":
        assert got is not None, "the stream hung"
        events = [b.split(b"data: ", 1)[1] for b in got.split(b"\n\n") if b"data: " in b]
        assert any(b"shutting down" in e for e in events), got[-400:]
        assert events[-1].startswith(b"[DONE]"), got[-400:]
        assert got.endswith(b"\r\n0\r\n\r\n"), got[-100:]
    assert "stopped after" in s.stderr()


def test_disconnect_aborts_a_long_prefill(long_dir):
    """A client that goes away during a long prefill: its request is aborted at the next step
    boundary (within about one step), not after its prefill, and its blocks come back."""
    s = Server(long_dir, *SLOW)
    try:
        so = long_prefill(s)
        so.close()
        t0 = time.monotonic()
        end = t0 + 30
        while time.monotonic() < end:
            m = s.metrics()
            if m["ragged_gen_num_requests_running"] == 0:
                break
            time.sleep(0.05)
        took = time.monotonic() - t0
        assert m["ragged_gen_num_requests_running"] == 0 and m["ragged_gen_kv_blocks_used"] == 0
        assert m["ragged_gen_requests_aborted_total"] == 1
        assert took <= STEP_MS / 1e3 + SLACK_S, took
    finally:
        s.stop()
