"""`ragged serve` under overload and at shutdown (issue 9, items 10, 11, 14), on the tiny model with
a simulated slow device (--token-delay-us 500: 0.5 ms per computed token, a sleep, so the timings
hold on a loaded 2-core machine and under ASan):

- a large request runs as many short batches (the time budget --max-batch-ms, estimated from the
  measured batch cost) and short requests sent meanwhile finish long before it, with the same
  vectors as the library computes in one batch;
- a request whose deadline passes is stopped between its pieces and answered 504 on time;
- --max-client-batch-tokens caps the tokens of one request (413);
- a flood of more work than fits in the deadline gets 200 or 429 with Retry-After, no 504; a
  request that alone needs more than the timeout gets 413; /metrics keeps latency histograms per
  status class;
- SIGTERM drains: new connections are refused, open ones get 503, queued requests that fit in
  --shutdown-timeout-s are served, a long one is cut (503), the process exits 0 in time."""
import json
import signal
import threading
import time

import numpy as np
import pytest

from ragged_ctypes import Model
from server_util import Server, tiny_model

DELAY = ["--token-delay-us", 500, "--cache-entries", 0]
MS_PER_TOKEN = 0.5
LONG = " ".join(["hello"] * 118)   # 120 tokens with [CLS] and [SEP]: a 60 ms piece
MEDIUM = " ".join(["world"] * 48)  # 50 tokens: 25 ms


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("overload_tiny")), "h32_gelu")


class Timed:
    """POST in a thread; records status, headers, body, start and end (time.monotonic)."""

    def __init__(self, srv, body, path="/embed", timeout=30):
        self.srv, self.body, self.path, self.timeout = srv, body, path, timeout
        self.status = self.headers = self.data = self.error = None
        self.t0 = self.t1 = None
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        self.t0 = time.monotonic()
        try:
            self.status, self.headers, self.data = self.srv.post(self.path, self.body,
                                                                 timeout=self.timeout)
        except Exception as e:  # noqa: BLE001 - a dropped connection is a test failure
            self.error = repr(e)
        self.t1 = time.monotonic()

    def join(self):
        self.th.join(60)
        assert not self.th.is_alive()
        return self

    @property
    def ms(self):
        return (self.t1 - self.t0) * 1e3


def wait_for(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.005)
    return False


def test_large_request_is_split_and_short_ones_interleave(tiny_dir):
    """16 inputs x 120 tokens (~960 ms of device time) and, meanwhile, 8 short requests: with the
    default --max-batch-ms 100 each batch holds one 60 ms piece of the large request, so a short
    one waits for at most one piece. The large request's vectors equal the library's."""
    s = Server(tiny_dir, *DELAY)
    try:
        big = Timed(s, {"inputs": [LONG] * 16, "normalize": False})
        time.sleep(0.15)  # queued and running (its tokenization takes a few ms)
        shorts = []
        for i in range(8):
            shorts.append(Timed(s, {"inputs": f"short request {i}"}))
            time.sleep(0.06)
        for r in shorts:
            r.join()
        big.join()
        assert big.status == 200, big.data
        assert big.ms >= 16 * 120 * MS_PER_TOKEN * 0.9
        for r in shorts:
            assert r.status == 200, r.data
            assert r.ms < 400, f"short request took {r.ms:.0f} ms while the large one ran"
            assert r.t1 < big.t1, "a short request sent during the large one finished after it"
        m = s.metrics()
        # about one piece (and the short ones) per batch, none over 256 tokens: >= 16 batches on a
        # quiet machine; >= 8 asserted, since a slow start-up measurement (ASan on a loaded
        # machine) raises the budget's floor (10x the fixed cost) to two pieces. Unsplit: 1 batch
        assert m["ragged_batches_total"] >= 8
        assert m['ragged_batch_tokens_bucket{le="256"}'] == m["ragged_batch_tokens_count"]
        # the pieces computed in 16 batches give what the library gives in one
        st, toks = s.post_json("/tokenize", {"inputs": [LONG]})
        ids = [[t["id"] for t in toks[0]]]  # TEI's token objects
        assert st == 200 and len(ids[0]) == 120
        lib = Model(tiny_dir)
        try:
            ref = lib.embed_ids(ids * 16, 32)
        finally:
            lib.close()
        np.testing.assert_allclose(np.array(json.loads(big.data)), ref, rtol=1e-5, atol=2e-6)
    finally:
        s.stop()


@pytest.mark.parametrize("budget_ms,n_inputs,batches,per_batch", [
    (250, 16, (4, 5), 4),   # 4 pieces of 60 ms fit in 250 ms: 4 batches of 4
    (0, 8, (1, 1), 8),      # no time budget: the token budget alone, one batch
])
def test_time_budget_from_measured_cost(tiny_dir, budget_ms, n_inputs, batches, per_batch):
    """The batch budget is a time, converted to pieces through the measured cost: 60 ms pieces
    make batches of floor(250 / 60) = 4; --max-batch-ms 0 leaves one batch of every piece."""
    s = Server(tiny_dir, *DELAY, "--max-batch-ms", budget_ms)
    try:
        r = Timed(s, {"inputs": [LONG] * n_inputs}).join()
        assert r.status == 200, r.data
        m = s.metrics()
        assert batches[0] <= m["ragged_batches_total"] <= batches[1], m["ragged_batches_total"]
        assert m['ragged_batch_size_bucket{le="%d"}' % per_batch] == m["ragged_batches_total"]
    finally:
        s.stop()


def test_deadline_stops_a_split_request_on_time(tiny_dir):
    """Admitted by count only, a ~960 ms request with a 300 ms timeout is stopped between pieces:
    504 within one piece of the deadline (not after its whole work, not 2x late), and the pieces
    after the deadline never run. --max-client-batch-tokens caps a request's tokens (413)."""
    s = Server(tiny_dir, *DELAY, "--admission", "count", "--request-timeout-ms", 300,
               "--max-client-batch-tokens", 2000)
    try:
        r = Timed(s, {"inputs": [LONG] * 16}).join()
        assert r.status == 504, r.data
        assert json.loads(r.data)["error_type"] == "timeout"
        assert 290 <= r.ms < 300 + 60 + 120, f"504 after {r.ms:.0f} ms"
        m = s.metrics()
        assert m["ragged_expired_total"] == 1
        assert m["ragged_batches_total"] <= 8  # of 16 pieces
        st, out = s.post_json("/embed", {"inputs": "still serving"})
        assert st == 200 and len(out) == 1
        # 17 x 120 = 2040 tokens > 2000
        st, h, data = s.post("/embed", {"inputs": [LONG] * 17})
        assert st == 413, data
        err = json.loads(data)
        assert err["error_type"] == "payload_too_large"
        assert "2040" in err["error"] and "--max-client-batch-tokens" in err["error"]
    finally:
        s.stop()


def test_admission_by_time_flood(tiny_dir):
    """24 concurrent requests of 200 ms each (4.8 s of work) against a 600 ms deadline: what fits
    is served in time, the rest is refused at once with 429 and Retry-After; no 504. A request
    that alone needs more than the timeout gets 413. The latency histograms are per status
    class: the refusals do not pull the 2xx latencies toward 0 ms."""
    s = Server(tiny_dir, *DELAY, "--request-timeout-ms", 600)
    try:
        reqs = [Timed(s, {"inputs": [MEDIUM] * 8}) for _ in range(24)]
        for r in reqs:
            r.join()
        assert all(r.error is None for r in reqs), [r.error for r in reqs]
        codes = [r.status for r in reqs]
        assert set(codes) <= {200, 429}, codes
        n200, n429 = codes.count(200), codes.count(429)
        assert n200 >= 2 and n429 >= 12, codes
        for r in reqs:
            if r.status == 200:
                assert r.ms < 600
            else:
                assert 1 <= int(r.headers["retry-after"]) <= 5, r.headers
                assert json.loads(r.data)["error_type"] == "overloaded"
                assert r.ms < 300  # refused at once, not after waiting
        # alone more than the timeout: 16 x 120 tokens ~ 960 ms > 600 ms
        st, h, data = s.post("/embed", {"inputs": [LONG] * 16})
        assert st == 413 and json.loads(data)["error_type"] == "payload_too_large", data
        # the queue drained: a retry is served
        st, out = s.post_json("/embed", {"inputs": [MEDIUM] * 8})
        assert st == 200
        m = s.metrics()
        assert m['ragged_requests_total{route="embed",code="429"}'] == n429
        assert m["ragged_expired_total"] == 0
        c2, c4 = 'ragged_total_time_ms_count{class="2xx"}', 'ragged_total_time_ms_count{class="4xx"}'
        assert m[c2] == n200 + 1 and m[c4] == n429 + 1
        assert m['ragged_total_time_ms_count{class="5xx"}'] == 0
        assert m['ragged_total_time_ms_sum{class="2xx"}'] / m[c2] > 150  # 200 ms of work each
        assert m['ragged_total_time_ms_sum{class="4xx"}'] / m[c4] < 100
        assert m['ragged_queue_time_ms_bucket{class="4xx",le="+Inf"}'] == n429 + 1
    finally:
        s.stop()


def test_sigterm_drains_what_fits(tiny_dir):
    """A 2.4 s request and 8 requests of 120 ms queued, then SIGTERM with --shutdown-timeout-s 2:
    new connections are refused, an open connection gets 503 + Retry-After, the short requests
    are served (shortest first), the long one is cut with 503, and the server exits 0 within the
    timeout. Every client gets an HTTP answer."""
    s = Server(tiny_dir, *DELAY, "--shutdown-timeout-s", 2, "--max-inputs", 64)
    rc = None
    try:
        keep = s.conn(10)
        keep.request("GET", "/health")
        resp = keep.getresponse()
        resp.read()
        assert resp.status == 200
        big = Timed(s, {"inputs": [LONG] * 40})
        assert wait_for(lambda: s.metrics()["ragged_batches_total"] >= 1)
        meds = [Timed(s, {"inputs": [" ".join(["world"] * 58)] * 4}) for _ in range(8)]
        # every medium request is queued before the signal (one still in the listen backlog would
        # be refused, rightly): sequences waiting + a lower bound of those done (tokens / 120, the
        # longest) reach 72 - 3 only when all 72 arrived, whatever the batch in flight holds
        def all_queued():
            m = s.metrics()
            return m["ragged_queue_depth"] + m["ragged_real_tokens_total"] // 120 >= 72 - 3
        assert wait_for(all_queued)
        t_sig = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        keep.request("GET", "/health")
        resp = keep.getresponse()
        resp.read()
        assert resp.status == 503 and int(resp.getheader("Retry-After")) >= 1
        keep.close()
        try:
            st = s.request("GET", "/health", timeout=2)[0]
        except ConnectionError:
            st = "refused"
        assert st in ("refused", 503), st
        rc = s.proc.wait(10)
        took = time.monotonic() - t_sig
        for r in [big] + meds:
            r.join()
        errs = [f"{i}: {r.error}" for i, r in enumerate([big] + meds) if r.error is not None]
        assert not errs, "; ".join(errs)
        assert rc == 0, s.stderr()
        assert took < 2 + 0.8, f"exit {took:.2f} s after SIGTERM"
        assert big.status == 503 and int(big.headers["retry-after"]) >= 1, big.data
        codes = [r.status for r in meds]
        assert set(codes) <= {200, 503} and codes.count(200) >= 6, codes
        assert "draining" in s.stderr()
    finally:
        s.stop(expect_rc=rc if rc is not None else 0)


def test_short_requests_pass_several_large_ones(tiny_dir):
    """Issue 18 item 10: four requests of 16 x 120 tokens at once (~3.8 s of device time) and,
    meanwhile, a short request every 150 ms. Each large one gets its fair share, not credit for
    the time it waited, so every short one waits about one piece (60 ms) whatever the number of
    large ones; under the old stamps a short one sent t ms in waited about 4 t. The large ones
    all finish (no starvation)."""
    s = Server(tiny_dir, *DELAY)
    try:
        bigs = [Timed(s, {"inputs": [LONG] * 16}) for _ in range(4)]
        assert wait_for(lambda: s.metrics()["ragged_batches_total"] >= 2)
        shorts = []
        for i in range(12):
            shorts.append(Timed(s, {"inputs": f"short request {i}"}))
            time.sleep(0.15)
        for r in shorts + bigs:
            r.join()
        assert all(r.status == 200 for r in bigs), [r.status for r in bigs]
        assert min(r.t1 for r in bigs) > max(r.t1 for r in shorts), "sent after the large ones"
        for r in shorts:
            assert r.status == 200, r.data
            assert r.ms < 400, f"short request took {r.ms:.0f} ms beside 4 large ones"
    finally:
        s.stop()


def test_count_admission_finishes_what_it_started(tiny_dir):
    """Issue 18 item 11: admitted by count, four requests of 8 x 120 tokens (480 ms each) at once
    under a 1.2 s timeout. Interleaved, all four would end at ~1.9 s and get 504 (no goodput);
    the large ones run one after another instead, so the first two are answered in time and only
    the others get 504. A short request still passes them."""
    s = Server(tiny_dir, *DELAY, "--admission", "count", "--request-timeout-ms", 1200)
    try:
        bigs = [Timed(s, {"inputs": [LONG] * 8}) for _ in range(4)]
        assert wait_for(lambda: s.metrics()["ragged_batches_total"] >= 2)
        short = Timed(s, {"inputs": "short"}).join()
        for r in bigs:
            r.join()
        codes = sorted(r.status for r in bigs)
        assert set(codes) <= {200, 504} and codes.count(200) >= 2, codes
        for r in bigs:
            if r.status == 200:
                assert r.ms < 1200 + 100
        assert short.status == 200 and short.ms < 400, (short.status, short.ms)
    finally:
        s.stop()


def test_retry_after_from_the_queued_work(tiny_dir):
    """Issue 18 item 11: Retry-After is the estimated time until the same request would fit, not
    always 1. 16 requests of 200 ms (3.2 s of work) against a 3 s timeout: the refused ones are
    told to come back after most of the queued work (>= 2 s, never past it by more than the
    timeout), and a request sent after that wait is served."""
    s = Server(tiny_dir, *DELAY, "--request-timeout-ms", 3000)
    try:
        reqs = [Timed(s, {"inputs": [MEDIUM] * 8}) for _ in range(16)]
        for r in reqs:
            r.join()
        refused = [r for r in reqs if r.status == 429]
        # an admitted request may still miss its deadline (504) when the machine runs slower than
        # the cost model measured (other processes on the 2 cores); what this test is about is the
        # refused ones' Retry-After
        statuses = [r.status for r in reqs]
        assert refused and all(st in (200, 429, 504) for st in statuses), statuses
        assert statuses.count(200) >= 4, statuses
        waits = [int(r.headers["retry-after"]) for r in refused]
        assert max(waits) >= 2 and max(waits) <= 6, waits
        time.sleep(max(waits))
        st, out = s.post_json("/embed", {"inputs": [MEDIUM] * 8})
        assert st == 200
    finally:
        s.stop()
